import type { Hono } from "hono";
import pino from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import { signManifest } from "../protocol/manifest.ts";
import { createTestStore } from "../store/createTestStore.ts";
import type { Store } from "../store/store.ts";
import { createMarket } from "./createMarket.ts";
import { signSellerRemoval } from "./marketApi.ts";
import { createMarketClient } from "./marketClient.ts";
import { testCapability, testManifest, testSellers } from "./testManifests.ts";

const [alice, bob] = testSellers as [(typeof testSellers)[number], (typeof testSellers)[number]];
const logger = pino({ level: "silent" });
// Starting PGlite (WebAssembly) and migrating takes tens of seconds on a busy two-core machine.
const STORE_START_TIMEOUT_MS = 180_000;
const base = "http://market.test";

/** A `fetch` that hands requests to a Hono app, as the network would. */
function fetchVia(app: { request: Hono["request"] }) {
  return async (input: Request | string | URL, init?: RequestInit) =>
    app.request(input instanceof Request ? input : String(input), init);
}

function fetchReplying(status: number, body: string, headers: Record<string, string> = {}) {
  return async () => new Response(body, { status, headers });
}

describe("createMarketClient", () => {
  let store: Store;
  let clock: ReturnType<typeof createFixedClock>;
  let app: Hono;

  beforeAll(async () => {
    store = await createTestStore({ logger });
  }, STORE_START_TIMEOUT_MS);
  afterAll(async () => {
    await store?.close();
  });
  beforeEach(async () => {
    await store.exec("TRUNCATE market_sellers CASCADE");
    clock = createFixedClock(1_763_800_000_000);
    app = createMarket({ store, clock, logger });
  });

  it("registers, reads back with the signature checked, searches, lists and removes", async () => {
    const market = createMarketClient({ url: `${base}/`, fetch: fetchVia(app) });
    expect(market.url).toBe(base);
    const now = unixSeconds(clock);
    const envelope = await signManifest(
      alice,
      testManifest(alice, now, [testCapability("forecast", "Weather forecast.")], { name: "Weather Desk" }),
    );
    expect(await market.register(envelope)).toEqual({
      status: "created",
      address: alice.address,
      issuedAt: now,
    });

    const seller = await market.get(alice.address.toLowerCase());
    expect(seller?.address).toBe(alice.address);
    expect(seller?.manifest.name).toBe("Weather Desk");
    expect(seller?.envelope.signature).toBe(envelope.signature);

    const found = await market.search({ q: "weather", maxPrice: 20_000n, scheme: "one-time" });
    expect(found.results.map((r) => r.capability.name)).toEqual(["forecast"]);
    expect((await market.search({ maxPrice: "0.019999" })).results).toEqual([]);

    expect((await market.list()).sellers.map((s) => s.address)).toEqual([alice.address]);
    expect(await market.remove(alice.address, await signSellerRemoval(alice, now))).toEqual({
      status: "removed",
      address: alice.address,
      issuedAt: now,
    });
    expect(await market.get(alice.address)).toBeUndefined();
  });

  it("throws the market's error code for a refused registration", async () => {
    const market = createMarketClient({ url: base, fetch: fetchVia(app) });
    const { manifest } = await signManifest(
      alice,
      testManifest(alice, unixSeconds(clock), [testCapability("x", "X.")]),
    );
    const signature = await bob.signMessage({ message: JSON.stringify(manifest) });
    await expect(market.register({ manifest, signature })).rejects.toMatchObject({
      code: "InvalidSignature",
      details: { reason: "wrong_signer" },
    });
    await expect(market.search({ maxPrice: "1e6" })).rejects.toMatchObject({ code: "InvalidRequest" });
  });

  it("refuses a manifest the market altered, so buyers need not trust the market", async () => {
    const envelope = await signManifest(
      alice,
      testManifest(alice, unixSeconds(clock), [testCapability("x", "X.")]),
    );
    const lying = async () =>
      Response.json({
        address: alice.address,
        manifest: { ...envelope.manifest, baseUrl: "http://attacker.example" },
        signature: envelope.signature,
        registeredAt: 1,
        updatedAt: 1,
      });
    const market = createMarketClient({ url: base, fetch: lying });
    await expect(market.get(alice.address)).rejects.toMatchObject({ code: "InvalidSignature" });

    const misfiled = async () =>
      Response.json({ address: bob.address, ...envelope, registeredAt: 1, updatedAt: 1 });
    await expect(createMarketClient({ url: base, fetch: misfiled }).get(bob.address)).rejects.toMatchObject({
      code: "InvalidSignature",
      details: { reason: "wrong_seller" },
    });
  });

  it("maps transport failures and malformed replies to typed errors", async () => {
    const unreachable = createMarketClient({
      url: base,
      fetch: async () => {
        throw new TypeError("fetch failed");
      },
    });
    await expect(unreachable.search()).rejects.toMatchObject({
      code: "ChainUnavailable",
      message: `market at ${base}/catalog is unreachable`,
      details: { reason: "market_unreachable" },
    });

    const gateway = createMarketClient({ url: base, fetch: fetchReplying(502, "<html>bad gateway</html>") });
    await expect(gateway.list()).rejects.toMatchObject({
      code: "ChainUnavailable",
      details: { status: 502 },
    });

    const limited = createMarketClient({
      url: base,
      fetch: fetchReplying(429, JSON.stringify({ error: { code: "RateLimited", message: "slow down" } }), {
        "retry-after": "30",
      }),
    });
    await expect(limited.refresh(alice.address)).rejects.toMatchObject({
      code: "RateLimited",
      retryAfter: 30,
    });

    const garbled = createMarketClient({
      url: base,
      fetch: fetchReplying(200, JSON.stringify({ results: 3 })),
    });
    await expect(garbled.search()).rejects.toMatchObject({
      code: "Internal",
      details: { reason: "market_bad_reply" },
    });
  });

  it("refuses a URL that is not http(s) and a missing fetch", () => {
    expect(() => createMarketClient({ url: "ftp://market", fetch: fetchVia(app) })).toThrow(
      expect.objectContaining({ code: "InvalidRequest" }),
    );
    expect(() => createMarketClient({ url: base, fetch: undefined as never })).toThrow(
      expect.objectContaining({ code: "InvalidRequest" }),
    );
  });
});
