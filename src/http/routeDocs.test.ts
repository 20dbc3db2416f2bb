import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { buildOpenApiDocument } from "../facilitator/openApi.ts";
import { authenticating, openApiPath, routeDoc, servedRoutes } from "./routeDocs.ts";

const guard = authenticating("dashboardSession", async (_c: unknown, next: () => Promise<void>) => {
  await next();
});

function sampleApp(): Hono {
  const sub = new Hono();
  sub.onError((error) => {
    throw error;
  });
  sub.get("/login", routeDoc({ summary: "sign in" }), (c) => c.text("form"));
  sub.use("*", guard);
  sub.get("/", routeDoc({ summary: "home" }), (c) => c.text("home"));
  sub.post("/items/:id", routeDoc({ summary: "an item", params: { id: z.string() } }), (c) => c.text("ok"));
  const app = new Hono();
  app.use(async (_c, next) => {
    await next();
  });
  app.get(
    "/keyed",
    authenticating("providerKey", async (_c, next) => next()),
    (c) => c.text("k"),
  );
  app.get("/bare", (c) => c.text("b"));
  app.route("/dashboard", sub);
  return app;
}

describe("servedRoutes", () => {
  it("lists each (method, path) once, with the guards registered before it under its path", () => {
    const routes = servedRoutes(sampleApp()).map((r) => [r.method, r.path, r.doc?.summary, r.auth]);
    expect(routes).toEqual([
      ["GET", "/keyed", undefined, ["providerKey"]],
      ["GET", "/bare", undefined, []],
      ["GET", "/dashboard/login", "sign in", []],
      ["GET", "/dashboard", "home", ["dashboardSession"]],
      ["POST", "/dashboard/items/:id", "an item", ["dashboardSession"]],
    ]);
  });

  it("puts an undocumented route in the document rather than leaving it out", () => {
    const doc = buildOpenApiDocument(servedRoutes(sampleApp())) as {
      paths: Record<string, Record<string, { summary: string; security?: unknown }>>;
    };
    expect(doc.paths["/bare"]?.get?.summary).toBe("Undocumented");
    expect(doc.paths["/dashboard/items/{id}"]?.post?.security).toEqual([{ dashboardSession: [] }]);
  });
});

describe("openApiPath", () => {
  it("writes Hono parameters, constrained or not, as OpenAPI ones", () => {
    expect(openApiPath("/webhooks/:id/deliveries/:deliveryId{[0-9a-f]+}/retry")).toBe(
      "/webhooks/{id}/deliveries/{deliveryId}/retry",
    );
  });
});
