import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { errorResponse } from "../http/httpErrors.ts";
import { assertMetricsReader, isLoopback, type MetricsAccess } from "./metricsAccess.ts";

function appWith(access: MetricsAccess) {
  const app = new Hono();
  app.onError((error) => errorResponse(error));
  app.get("/metrics", (c) => {
    assertMetricsReader(c, access);
    return c.text("ok");
  });
  return app;
}

/** The bindings @hono/node-server passes: the request's socket. */
const peer = (remoteAddress: string) => ({ incoming: { socket: { remoteAddress } } });

describe("metrics access", () => {
  it("tells loopback addresses, IPv4-mapped ones included, from the rest", () => {
    for (const a of ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"]) expect(isLoopback(a)).toBe(true);
    for (const a of ["192.0.2.2", "::ffff:192.0.2.2", "fd00::2", "0.0.0.0", "1127.0.0.1", undefined]) {
      expect(isLoopback(a)).toBe(false);
    }
  });

  it("answers a loopback peer without a token, and refuses remote, forwarded and socketless requests", async () => {
    const app = appWith({});
    expect((await app.request("/metrics", {}, peer("127.0.0.1"))).status).toBe(200);
    expect((await app.request("/metrics", {}, peer("::1"))).status).toBe(200);
    expect((await app.request("/metrics", {}, peer("192.0.2.2"))).status).toBe(401);
    const forwarded = { headers: { "x-forwarded-for": "203.0.113.1" } };
    expect((await app.request("/metrics", forwarded, peer("127.0.0.1"))).status).toBe(401);
    expect((await app.request("/metrics")).status).toBe(401);
  });

  it("with a token, requires it from every peer", async () => {
    const app = appWith({ token: "a-token-of-sixteen-chars" });
    const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });
    expect((await app.request("/metrics", {}, peer("127.0.0.1"))).status).toBe(401);
    expect(
      (await app.request("/metrics", bearer("a-token-of-sixteen-charz"), peer("127.0.0.1"))).status,
    ).toBe(401);
    expect(
      (await app.request("/metrics", bearer("a-token-of-sixteen-chars"), peer("192.0.2.2"))).status,
    ).toBe(200);
  });
});
