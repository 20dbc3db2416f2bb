import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodePathOnce, normalizeRequestTarget, readPath } from "./normalizeRequestTarget.ts";

function read(target: string) {
  const reading = normalizeRequestTarget(target);
  if (!reading.ok) throw new Error(`refused ${JSON.stringify(target)}: ${reading.reason}`);
  return reading;
}

describe("normalizeRequestTarget", () => {
  it("reads an origin-form target into its path and query, unchanged", () => {
    expect(read("/api/reports/1?size=large&x=%20")).toEqual({
      ok: true,
      path: "/api/reports/1",
      query: "size=large&x=%20",
      routePath: "/api/reports/1",
      target: "/api/reports/1?size=large&x=%20",
      dotSegments: false,
      absoluteForm: false,
    });
    expect(read("/")).toMatchObject({ path: "/", query: "", target: "/" });
    expect(read("/x?")).toMatchObject({ path: "/x", query: "", target: "/x" });
  });

  it.each([
    ["/x/../api/x", "/api/x"],
    ["/api/reports/..", "/api/"],
    ["/api/reports/.", "/api/reports/"],
    ["/a/./b/../../c/", "/c/"],
    ["/..", "/"],
    ["/../../api/x", "/api/x"],
    ["/a//..", "/a/"],
    ["/x/%2e%2e/api/x", "/api/x"],
    ["/x/%2E./api/x", "/api/x"],
    ["/x/.%2e/api/x", "/api/x"],
    ["/api/%2e/x", "/api/x"],
  ])("removes dot segments (RFC 3986 §5.2.4), also percent-encoded: %s → %s", (target, path) => {
    const reading = read(target);
    expect(reading.path).toBe(path);
    expect(reading.dotSegments).toBe(true);
    // The same path WHATWG URL parsing (browsers, fetch, Hono's server) arrives at.
    expect(new URL(target, "http://h").pathname).toBe(path);
  });

  it("keeps segments that only look like dots", () => {
    for (const path of ["/a/.../b", "/a/.b/c.", "/a/%2e%2e%2e", "/a/..b", "/a/%252e%252e/b"]) {
      expect(read(path)).toMatchObject({ path, dotSegments: false });
    }
  });

  it("reduces an absolute-form target to its path and ignores its authority", () => {
    expect(read("http://evil.example/api/x?a=1")).toMatchObject({
      path: "/api/x",
      query: "a=1",
      target: "/api/x?a=1",
      absoluteForm: true,
    });
    expect(read("http://host")).toMatchObject({ path: "/", query: "" });
    expect(read("http://host?q")).toMatchObject({ path: "/", query: "q" });
    expect(read("https://user:pw@h:8080/x/../api")).toMatchObject({ path: "/api", dotSegments: true });
    expect(read("HTTP://[::1]:80/api")).toMatchObject({ path: "/api", absoluteForm: true });
  });

  it("decodes the path once for routing, keeping reserved characters escaped", () => {
    expect(read("/api/r%65ports/caf%C3%A9").routePath).toBe("/api/reports/café");
    expect(read("/a/%252e%252e").routePath).toBe("/a/%2e%2e");
    expect(read("/a%3Fb").routePath).toBe("/a%3Fb");
    expect(read("/a/%FF").routePath).toBe("/a/%FF");
    expect(decodePathOnce("/plain")).toBe("/plain");
  });

  it.each([
    ["", /empty/],
    ["*", /neither a path nor an absolute URL/],
    ["example.com:443", /neither a path nor an absolute URL/],
    ["api/x", /neither a path nor an absolute URL/],
    ["/api/x#frag", /fragment/],
    ["/api/x?a#b", /fragment/],
    ["/api\\x", /may not hold unescaped/],
    ["/api/x y", /visible ASCII/],
    ["/api/\u00e9", /visible ASCII/],
    ["/api/x\t", /visible ASCII/],
    ['/api/"x"', /may not hold unescaped/],
    ["/api/{x}", /may not hold unescaped/],
    ["/api/%zz", /malformed percent-escape/],
    ["/api/%2", /malformed percent-escape/],
    ["/api%2Freports/1", /encoded slash/],
    ["/api%5creports", /encoded slash/],
    ["/api/%00", /control character/],
    ["//api/x", /starts with \/\//],
    ["/..//api/x", /starts with \/\//],
    ["http://h//api/x", /starts with \/\//],
    [`/${"a".repeat(9000)}`, /too long/],
  ])("refuses %j", (target, reason) => {
    const reading = normalizeRequestTarget(target);
    expect(reading.ok).toBe(false);
    if (!reading.ok) expect(reading.reason).toMatch(reason);
  });

  it("agrees with WHATWG URL parsing on every path it accepts (generated)", () => {
    const pieces = [
      "a",
      "b",
      ".",
      "..",
      "%2e",
      "%2E%2e",
      "",
      "%41",
      "x.y",
      "~",
      "%25",
      "é",
      "%2F",
      "#",
      "?q",
    ];
    let seed = 7;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed;
    };
    let accepted = 0;
    for (let round = 0; round < 3000; round++) {
      const length = 1 + (next() % 6);
      const target = `/${Array.from({ length }, () => pieces[next() % pieces.length]).join("/")}`;
      const reading = normalizeRequestTarget(target);
      if (!reading.ok) continue;
      accepted++;
      const url = new URL(target, "http://h");
      expect(reading.path, target).toBe(url.pathname);
      expect(reading.query, target).toBe(url.search.slice(1));
      // Normal already: reading the result again changes nothing.
      expect(normalizeRequestTarget(reading.target)).toMatchObject({
        path: reading.path,
        dotSegments: false,
      });
    }
    expect(accepted).toBeGreaterThan(500);
  });

  it("reads a path by its one-pattern shortcut exactly as the full checks read it", () => {
    // Paths from the characters that decide the checks: dots, slashes, escapes, unreserved letters.
    const path = fc
      .array(fc.constantFrom("/", ".", "a", "Z", "0", "-", "_", "~", "%2e", "%2F", "%41", "%", ";", "@"), {
        maxLength: 12,
      })
      .map((parts) => `/${parts.join("")}`);
    fc.assert(
      fc.property(path, fc.constantFrom("", "q=1", "a=%20&b"), fc.boolean(), (rawPath, query, absolute) => {
        const target = `${absolute ? "http://api.example" : ""}${rawPath}${query === "" ? "" : `?${query}`}`;
        expect(normalizeRequestTarget(target)).toEqual(readPath(rawPath, query, absolute));
      }),
      { numRuns: 2_000 },
    );
  });
});
