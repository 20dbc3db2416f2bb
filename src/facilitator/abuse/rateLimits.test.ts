import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import { errorResponse } from "../httpErrors.ts";
import { bucketKey, clientAddress, createRateLimits, normalizeAddress } from "./rateLimits.ts";

const start = Date.UTC(2026, 10, 24, 12);

function refusal(fn: () => void) {
  try {
    fn();
  } catch (error) {
    if (isTollgateError(error)) return error;
    throw error;
  }
  return undefined;
}

describe("clientAddress", () => {
  const proxies = new Set(["10.0.0.1", "10.0.0.2"]);

  it("uses the TCP peer and ignores X-Forwarded-For from an untrusted peer", () => {
    expect(clientAddress("203.0.113.9", "198.51.100.1", proxies)).toBe("203.0.113.9");
    expect(clientAddress("203.0.113.9", "198.51.100.1", new Set())).toBe("203.0.113.9");
  });

  it("behind trusted proxies, takes the right-most address no trusted proxy wrote", () => {
    // The client forged the first entry; the proxies appended what they saw.
    expect(clientAddress("10.0.0.1", "1.1.1.1, 198.51.100.7, 10.0.0.2", proxies)).toBe("198.51.100.7");
    expect(clientAddress("10.0.0.1", "198.51.100.7", proxies)).toBe("198.51.100.7");
    expect(clientAddress("10.0.0.1", undefined, proxies)).toBe("10.0.0.1");
  });

  it("stops at an entry that is not an address", () => {
    expect(clientAddress("10.0.0.1", "198.51.100.7, junk", proxies)).toBe("10.0.0.1");
  });

  it("reads IPv4-mapped IPv6 peers as IPv4", () => {
    expect(normalizeAddress("::ffff:127.0.0.1")).toBe("127.0.0.1");
    expect(clientAddress("::ffff:10.0.0.1", "198.51.100.7", proxies)).toBe("198.51.100.7");
  });

  it("has no address for an in-process request", () => {
    expect(clientAddress(undefined, "198.51.100.7", proxies)).toBe("unknown");
  });
});

describe("bucketKey", () => {
  it("limits IPv6 clients per /64 and IPv4 clients per address", () => {
    expect(bucketKey("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64");
    expect(bucketKey("2001:db8:1:2:bbbb:cccc:dddd:eeee")).toBe("2001:db8:1:2::/64");
    expect(bucketKey("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(bucketKey("::1")).toBe("0:0:0:0::/64");
    expect(bucketKey("203.0.113.9")).toBe("203.0.113.9");
  });
});

describe("createRateLimits", () => {
  it("answers RateLimited with Retry-After once a client address has spent its bucket", () => {
    const clock = createFixedClock(start);
    const limits = createRateLimits({ clock, perClient: { capacity: 2, refillPerSecond: 0.5 } });
    limits.takeClient("203.0.113.9", undefined);
    limits.takeClient("203.0.113.9", undefined);
    const error = refusal(() => limits.takeClient("203.0.113.9", undefined));
    expect(error?.code).toBe("RateLimited");
    expect(error?.status).toBe(429);
    expect(error?.retryAfter).toBe(2);
    expect(refusal(() => limits.takeClient("203.0.113.10", undefined))).toBeUndefined();
    clock.advance(2_000);
    expect(refusal(() => limits.takeClient("203.0.113.9", undefined))).toBeUndefined();
  });

  it("counts POSTs and channel reads (an eth_call each) against a client, not subscription reads", async () => {
    const limits = createRateLimits({
      clock: createFixedClock(start),
      perClient: { capacity: 2, refillPerSecond: 0.001 },
    });
    const app = new Hono();
    app.onError((error) => errorResponse(error));
    app.use("*", limits.clientMiddleware);
    app.all("*", (c) => c.text("ok"));
    const env = { incoming: { socket: { remoteAddress: "203.0.113.7" } } };
    const status = async (method: string, path: string) => (await app.request(path, { method }, env)).status;
    expect(await status("GET", "/subscriptions/1")).toBe(200);
    expect(await status("GET", `/channels/0x${"ab".repeat(32)}`)).toBe(200);
    expect(await status("POST", "/channels")).toBe(200);
    expect(await status("GET", `/channels/0x${"cd".repeat(32)}`)).toBe(429);
    expect(await status("GET", "/subscriptions/1")).toBe(200);
  });

  it("limits a payer whatever addresses it comes from, case-insensitively", () => {
    const clock = createFixedClock(start);
    const limits = createRateLimits({ clock, perPayer: { capacity: 1, refillPerSecond: 1 } });
    limits.takePayer("0xAbC0000000000000000000000000000000000001");
    const error = refusal(() => limits.takePayer("0xabc0000000000000000000000000000000000001"));
    expect(error?.code).toBe("RateLimited");
    expect(error?.details).toMatchObject({ limit: "payer" });
  });

  it("turns a limit off with false", () => {
    const clock = createFixedClock(start);
    const limits = createRateLimits({ clock, perClient: false, perPayer: false });
    for (let i = 0; i < 1_000; i++) {
      limits.takeClient("203.0.113.9", undefined);
      limits.takePayer("0xabc0000000000000000000000000000000000001");
    }
  });
});
