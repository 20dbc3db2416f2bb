import { describe, expect, it } from "vitest";
import type { GateRequest } from "./gateRequest.ts";
import { normalizeRequestTarget } from "./normalizeRequestTarget.ts";
import { SchemeRequestView } from "./requestView.ts";

function viewOf(request: Omit<GateRequest, "method" | "url">, trusted: string[] = []) {
  const reading = normalizeRequestTarget("/api/x");
  if (!reading.ok) throw new Error("bad target");
  return new SchemeRequestView(
    "GET",
    reading.path,
    reading,
    { method: "GET", url: "/api/x", ...request },
    "http://localhost",
    new Set(trusted),
  );
}

const headers = (forwardedFor?: string) =>
  new Headers(forwardedFor === undefined ? {} : { "x-forwarded-for": forwardedFor });

describe("SchemeRequestView.client", () => {
  it("is the peer the server saw, never a header, when no proxy is trusted", () => {
    expect(viewOf({ headers: headers("10.9.9.9"), remoteAddress: "::ffff:127.0.0.2" }).client).toBe(
      "127.0.0.2",
    );
  });

  it("is undefined when the host gave no peer, whatever the headers say", () => {
    expect(viewOf({ headers: headers("10.9.9.9") }, ["10.9.9.9"]).client).toBeUndefined();
  });

  it("reads X-Forwarded-For only from a trusted proxy, right to left past trusted hops", () => {
    const forwarded = headers("6.6.6.6, 203.0.113.7, 10.0.0.2");
    expect(viewOf({ headers: forwarded, remoteAddress: "10.0.0.1" }, ["10.0.0.1", "10.0.0.2"]).client).toBe(
      "203.0.113.7",
    );
    expect(viewOf({ headers: forwarded, remoteAddress: "10.0.0.5" }, ["10.0.0.1"]).client).toBe("10.0.0.5");
  });

  it("keys an IPv6 client by its /64", () => {
    const one = viewOf({ headers: headers(), remoteAddress: "2001:db8:1:2::aaaa" }).client;
    const other = viewOf({ headers: headers(), remoteAddress: "2001:db8:1:2:ffff::1" }).client;
    expect(one).toBe("2001:db8:1:2::/64");
    expect(other).toBe(one);
  });
});
