import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { createFixedClock } from "../protocol/clock.ts";
import { isTollgateError } from "../protocol/errors.ts";
import { errorResponse } from "./httpErrors.ts";
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

  describe("requests with a provider API key", () => {
    const gateKey = `tg_${"g".repeat(32)}`;
    const strangerKey = `tg_${"s".repeat(32)}`;
    const keys = new Map([
      [gateKey, { address: "0x00000000000000000000000000000000000070A1" }],
      [strangerKey, { address: "0x00000000000000000000000000000000000051A0" }],
    ]);
    const channelRead = `/channels/0x${"ab".repeat(32)}`;

    function appWith(rules: Parameters<typeof createRateLimits>[0]) {
      const looked: string[] = [];
      const limits = createRateLimits({
        ...rules,
        findProvider: async (apiKey) => {
          looked.push(apiKey);
          return keys.get(apiKey);
        },
      });
      const app = new Hono();
      app.onError((error) => errorResponse(error));
      app.use("*", limits.clientMiddleware);
      app.all("*", (c) => c.text("ok"));
      const from = (address: string) => ({ incoming: { socket: { remoteAddress: address } } });
      const read = async (address: string, key?: string) => {
        const headers: Record<string, string> = key === undefined ? {} : { authorization: `Bearer ${key}` };
        const response = await app.request(channelRead, { headers }, from(address));
        if (response.status === 200) return { status: 200, limit: undefined };
        const body = (await response.json()) as { error: { details?: { limit?: string } } };
        return { status: response.status, limit: body.error.details?.limit };
      };
      return { read, looked };
    }

    it("takes the provider's bucket, not the address's: strangers at the gate's address cannot spend it", async () => {
      const { read } = appWith({
        clock: createFixedClock(start),
        perClient: { capacity: 2, refillPerSecond: 0.001 },
        perProvider: { capacity: 5, refillPerSecond: 0.001 },
      });
      // Anonymous requests (and made-up keys) from the gate's address empty the address's bucket…
      expect(await read("203.0.113.7")).toEqual({ status: 200, limit: undefined });
      expect(await read("203.0.113.7", `tg_${"x".repeat(32)}`)).toEqual({ status: 200, limit: undefined });
      expect(await read("203.0.113.7")).toEqual({ status: 429, limit: "client" });
      // …and the gate, with its key, still has its own allowance.
      for (let i = 0; i < 5; i++) expect((await read("203.0.113.7", gateKey)).status).toBe(200);
      expect(await read("203.0.113.7", gateKey)).toEqual({ status: 429, limit: "provider" });
    });

    it("gives a stranger's own key its own provider's bucket, never another provider's", async () => {
      const { read } = appWith({
        clock: createFixedClock(start),
        perProvider: { capacity: 3, refillPerSecond: 0.001 },
      });
      for (let i = 0; i < 3; i++) expect((await read("198.51.100.9", strangerKey)).status).toBe(200);
      expect(await read("198.51.100.9", strangerKey)).toEqual({ status: 429, limit: "provider" });
      expect((await read("203.0.113.7", gateKey)).status).toBe(200);
      expect((await read("198.51.100.9", gateKey)).status).toBe(200);
    });

    it("bounds keyed requests per address, so many registered providers do not multiply one host's rate", async () => {
      const { read } = appWith({
        clock: createFixedClock(start),
        perProvider: { capacity: 100, refillPerSecond: 0.001 },
        perKeyedClient: { capacity: 3, refillPerSecond: 0.001 },
      });
      expect((await read("198.51.100.9", strangerKey)).status).toBe(200);
      expect((await read("198.51.100.9", gateKey)).status).toBe(200);
      expect((await read("198.51.100.9", strangerKey)).status).toBe(200);
      expect(await read("198.51.100.9", gateKey)).toEqual({ status: 429, limit: "keyedClient" });
      expect((await read("203.0.113.7", gateKey)).status).toBe(200);
    });

    it("counts a keyed request as anonymous while the store cannot look its key up", async () => {
      const limits = createRateLimits({
        clock: createFixedClock(start),
        perClient: { capacity: 1, refillPerSecond: 0.001 },
        findProvider: async () => {
          throw new Error("store unreachable");
        },
      });
      const app = new Hono();
      app.onError((error) => errorResponse(error));
      app.use("*", limits.clientMiddleware);
      app.all("*", (c) => c.text("ok"));
      const env = { incoming: { socket: { remoteAddress: "203.0.113.7" } } };
      const init = { headers: { authorization: `Bearer ${gateKey}` } };
      expect((await app.request(channelRead, init, env)).status).toBe(200);
      expect((await app.request(channelRead, init, env)).status).toBe(429);
    });

    it("looks up only well-formed keys; anything else is anonymous", async () => {
      const { read, looked } = appWith({
        clock: createFixedClock(start),
        perClient: { capacity: 1, refillPerSecond: 0.001 },
      });
      expect((await read("203.0.113.7", "not-a-key")).status).toBe(200);
      expect(await read("203.0.113.7", `tg_${"y".repeat(40)}`)).toEqual({ status: 429, limit: "client" });
      expect(looked).toEqual([]);
    });
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
