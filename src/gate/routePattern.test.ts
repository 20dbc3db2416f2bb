import { describe, expect, it } from "vitest";
import { compileRoutePattern } from "./routePattern.ts";

describe("compileRoutePattern", () => {
  it("matches a literal path for its method only", () => {
    const route = compileRoutePattern("POST /summarize");
    expect(route.method).toBe("POST");
    expect(route.matches("POST", "/summarize")).toBe(true);
    expect(route.matches("POST", "/summarize/")).toBe(true);
    expect(route.matches("GET", "/summarize")).toBe(false);
    expect(route.matches("POST", "/summarize/x")).toBe(false);
    expect(route.matches("POST", "/summarizer")).toBe(false);
  });

  it("errs on the side of charging: any letter case, and HEAD for a GET pattern", () => {
    const route = compileRoutePattern("GET /api/reports/:id");
    expect(route.matches("GET", "/API/Reports/1")).toBe(true);
    expect(route.matches("HEAD", "/api/reports/1")).toBe(true);
    expect(route.matches("POST", "/api/reports/1")).toBe(false);
  });

  it("matches exactly one non-empty segment for a :param", () => {
    const route = compileRoutePattern("GET /reports/:id");
    expect(route.matches("GET", "/reports/42")).toBe(true);
    expect(route.matches("GET", "/reports/")).toBe(false);
    expect(route.matches("GET", "/reports/42/raw")).toBe(false);
  });

  it("matches any method without one, and the rest of the path with a trailing *", () => {
    const route = compileRoutePattern("/files/*");
    expect(route.method).toBeUndefined();
    expect(route.matches("DELETE", "/files")).toBe(true);
    expect(route.matches("GET", "/files/a/b.txt")).toBe(true);
    expect(route.matches("GET", "/filesystem")).toBe(false);
    expect(compileRoutePattern("* /*").matches("PATCH", "/anything/at/all")).toBe(true);
  });

  it("treats regex characters in literal segments as text", () => {
    const route = compileRoutePattern("GET /v1.0/data");
    expect(route.matches("GET", "/v1.0/data")).toBe(true);
    expect(route.matches("GET", "/v1x0/data")).toBe(false);
  });

  it("refuses patterns that break the grammar", () => {
    expect(() => compileRoutePattern("get /x")).toThrow(/method/);
    expect(() => compileRoutePattern("GET x")).toThrow(/start with \//);
    expect(() => compileRoutePattern("GET /a/*/b")).toThrow(/last segment/);
    expect(() => compileRoutePattern("GET /a//b")).toThrow(/empty segment/);
    expect(() => compileRoutePattern("GET /a b")).toThrow();
    expect(() => compileRoutePattern("GET /(x)?")).toThrow(/segment/);
  });
});
