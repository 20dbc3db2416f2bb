import fc from "fast-check";
import { Hono } from "hono";
import pino from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { canonicalJson } from "../protocol/canonicalJson.ts";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import type { ErrorBody } from "../protocol/errors.ts";
import {
  type ManifestInput,
  manifestMessage,
  signManifest,
  verifyManifestSignature,
} from "../protocol/manifest.ts";
import { createTestStore } from "../store/createTestStore.ts";
import type { Store } from "../store/store.ts";
import { createMarket, createMarketService } from "./createMarket.ts";
import { type CatalogResult, signSellerRemoval } from "./marketApi.ts";
import type { SellerLiveness } from "./sellerLiveness.ts";
import { testCapability, testManifest, testSellers } from "./testManifests.ts";

const [alice, bob, carol, dave] = testSellers as [
  (typeof testSellers)[number],
  (typeof testSellers)[number],
  (typeof testSellers)[number],
  (typeof testSellers)[number],
];
const logger = pino({ level: "silent" });
// Starting PGlite (WebAssembly) and migrating takes tens of seconds on a busy two-core machine.
const STORE_START_TIMEOUT_MS = 180_000;

// biome-ignore lint/suspicious/noExplicitAny: replies are JSON checked field by field by the assertions
type Reply = { status: number; body: any; headers: Headers };

function marketSuite(databaseUrl: string | undefined) {
  let store: Store;
  let clock: ReturnType<typeof createFixedClock>;
  let app: Hono;
  let liveness: SellerLiveness;
  /** What the refresh endpoint's `fetch` reaches: sellers' own servers, by base URL. */
  const sellerSites = new Map<string, Hono>();
  /** Every URL the market fetched. */
  const fetched: string[] = [];

  const now = () => unixSeconds(clock);

  async function call(method: string, path: string, body?: unknown): Promise<Reply> {
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      init.headers = { "content-type": "application/json" };
    }
    const response = await app.request(path, init);
    return { status: response.status, body: await response.json(), headers: response.headers };
  }

  async function register(manifest: ManifestInput, account = alice): Promise<Reply> {
    return call("POST", "/sellers", await signManifest(account, manifest));
  }

  async function search(query: string): Promise<CatalogResult> {
    const reply = await call("GET", `/catalog?${query}`);
    expect(reply.status).toBe(200);
    return reply.body;
  }

  beforeAll(async () => {
    store = await createTestStore({ databaseUrl, logger });
  }, STORE_START_TIMEOUT_MS);
  afterAll(async () => {
    await store?.close();
  });
  beforeEach(async () => {
    await store.exec("TRUNCATE market_sellers CASCADE");
    clock = createFixedClock(1_763_800_000_000);
    sellerSites.clear();
    fetched.length = 0;
    const service = createMarketService({
      store,
      clock,
      logger,
      fetch: fetchSeller,
      // The test sellers live on loopback and 10/8: allowed here as on a devnet, refused by default.
      sellerTargets: { allowTargets: ["127.0.0.0/8", "10.0.0.0/8"] },
    });
    app = service.app;
    liveness = service.liveness!;
  });

  async function fetchSeller(input: Request | string | URL, init?: RequestInit) {
    const url = new URL(input instanceof Request ? input.url : input);
    fetched.push(url.href);
    const site = sellerSites.get(url.origin);
    if (site === undefined) throw new TypeError("fetch failed: connection refused");
    return site.request(url.pathname, init);
  }

  function serveSeller(origin: string, document: () => unknown) {
    const site = new Hono();
    site.get("/.well-known/tollgate.json", (c) => c.json(document() as object));
    sellerSites.set(origin, site);
  }

  describe("registration", () => {
    it("stores a signed manifest and returns it exactly as signed", async () => {
      const manifest = testManifest(alice, now(), [
        testCapability("forecast", "Seven-day weather forecast."),
      ]);
      const created = await register(manifest);
      expect(created.status).toBe(201);
      expect(created.body).toEqual({ status: "created", address: alice.address, issuedAt: now() });

      const record = await call("GET", `/sellers/${alice.address.toLowerCase()}`);
      expect(record.status).toBe(200);
      expect(record.body.address).toBe(alice.address);
      expect(record.body.registeredAt).toBe(now());
      expect(await verifyManifestSignature(record.body)).toMatchObject({
        valid: true,
        seller: alice.address,
      });

      const list = await call("GET", "/sellers");
      expect(list.body.sellers).toEqual([
        expect.objectContaining({ address: alice.address, capabilities: ["forecast"], issuedAt: now() }),
      ]);
    });

    it("answers 404 for a seller that is not registered", async () => {
      const reply = await call("GET", `/sellers/${bob.address}`);
      expect(reply.status).toBe(404);
      expect(reply.body.error.code).toBe("NotFound");
    });

    it("refuses an unsigned registration with 422 InvalidSignature", async () => {
      const manifest = testManifest(alice, now(), [testCapability("forecast", "Forecast.")]);
      const reply = await call("POST", "/sellers", { manifest });
      expect(reply.status).toBe(422);
      expect(reply.body.error).toMatchObject({
        code: "InvalidSignature",
        details: { reason: "missing_signature" },
      });
    });

    it("refuses a manifest signed by a key other than seller.payTo", async () => {
      const { manifest } = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      const signature = await bob.signMessage({ message: manifestMessage(manifest) });
      const reply = await call("POST", "/sellers", { manifest, signature });
      expect(reply.status).toBe(422);
      expect(reply.body.error).toMatchObject({
        code: "InvalidSignature",
        details: { reason: "wrong_signer" },
      });
      expect((await call("GET", `/sellers/${alice.address}`)).status).toBe(404);
    });

    it("refuses a manifest changed after it was signed", async () => {
      const envelope = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      const tampered = {
        ...envelope,
        manifest: { ...envelope.manifest, baseUrl: "http://attacker.example" },
      };
      const reply = await call("POST", "/sellers", tampered);
      expect(reply.status).toBe(422);
      expect(reply.body.error.details.reason).toBe("wrong_signer");
    });

    it("refuses malformed bodies and manifests with 400 and the issues", async () => {
      const notJson = await call("POST", "/sellers", "{not json");
      expect(notJson.status).toBe(400);
      expect(notJson.body.error.code).toBe("InvalidRequest");

      const noManifest = await call("POST", "/sellers", { signature: "0x00" });
      expect(noManifest.status).toBe(400);

      const bad = testManifest(alice, now(), [{ ...testCapability("x", "X."), name: "has space" }]);
      const signature = await alice.signMessage({ message: canonicalJson(bad) });
      const reply = await call("POST", "/sellers", { manifest: bad, signature });
      expect(reply.status).toBe(400);
      expect(reply.body.error.details.issues).toEqual([
        expect.objectContaining({ path: "capabilities.0.name" }),
      ]);

      const badSignature = await call("POST", "/sellers", {
        manifest: testManifest(alice, now(), [testCapability("x", "X.")]),
        signature: "0xnothex",
      });
      expect(badSignature.status).toBe(422);
      expect(badSignature.body.error.details.reason).toBe("malformed_signature");
    });

    it("refuses a manifest signed longer ago than the freshness window, and one from the future", async () => {
      const stale = await register(testManifest(alice, now() - 601, [testCapability("x", "X.")]));
      expect(stale.status).toBe(422);
      expect(stale.body.error).toMatchObject({ code: "AuthorizationExpired", details: { reason: "stale" } });
      expect((await register(testManifest(alice, now() - 600, [testCapability("x", "X.")]))).status).toBe(
        201,
      );

      const future = await register(testManifest(bob, now() + 301, [testCapability("x", "X.")]), bob);
      expect(future.status).toBe(400);
      expect(future.body.error.details.reason).toBe("issued_in_future");
    });

    it("never answers 500 for arbitrary JSON bodies or mangled envelopes", async () => {
      const envelope = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      const bodies = fc.oneof(
        fc.jsonValue(),
        fc.record({ manifest: fc.jsonValue(), signature: fc.oneof(fc.string(), fc.jsonValue()) }),
        fc
          .tuple(fc.constantFrom(...Object.keys(envelope.manifest)), fc.jsonValue())
          .map(([key, value]) => ({ ...envelope, manifest: { ...envelope.manifest, [key]: value } })),
      );
      await fc.assert(
        fc.asyncProperty(bodies, async (body) => {
          const reply = await call("POST", "/sellers", body);
          // Only the untouched signed manifest (a mangling that changed nothing) may be stored.
          const untouched =
            typeof body === "object" &&
            body !== null &&
            "manifest" in body &&
            canonicalJson(body.manifest) === canonicalJson(envelope.manifest);
          expect(untouched ? [200, 201] : [400, 413, 422]).toContain(reply.status);
        }),
        { numRuns: 150 },
      );
    });

    it("refuses an oversized registration with 413", async () => {
      const capabilities = Array.from({ length: 64 }, (_, i) => testCapability(`cap${i}`, "x".repeat(2000)));
      const huge = testManifest(alice, now(), capabilities, { description: "y".repeat(2000) });
      const small = createMarket({ store, clock, logger, maxManifestBytes: 64 * 1024 });
      const envelope = await signManifest(alice, huge);
      const reply = await small.request("/sellers", {
        method: "POST",
        body: JSON.stringify(envelope),
        headers: { "content-type": "application/json" },
      });
      expect(reply.status).toBe(413);
      expect(((await reply.json()) as ErrorBody).error.code).toBe("PayloadTooLarge");
    });
  });

  describe("updates", () => {
    it("replaces the manifest when issuedAt is newer, and its capabilities in the catalog", async () => {
      expect(
        (await register(testManifest(alice, now(), [testCapability("forecast", "Weather.")]))).status,
      ).toBe(201);
      clock.advance(5_000);
      const newer = await register(testManifest(alice, now(), [testCapability("translate", "Translation.")]));
      expect(newer.status).toBe(200);
      expect(newer.body).toEqual({ status: "updated", address: alice.address, issuedAt: now() });
      expect((await search("q=forecast")).results).toEqual([]);
      expect((await search("q=translate")).results.map((r) => r.capability.name)).toEqual(["translate"]);
      const record = await call("GET", `/sellers/${alice.address}`);
      expect(record.body.registeredAt).toBe(now() - 5);
      expect(record.body.updatedAt).toBe(now());
    });

    it("is idempotent for the same signed manifest", async () => {
      const envelope = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      expect((await call("POST", "/sellers", envelope)).status).toBe(201);
      const again = await call("POST", "/sellers", envelope);
      expect(again.status).toBe(200);
      expect(again.body.status).toBe("unchanged");
    });

    it("keeps the stored manifest against an older one or a different one of the same issuedAt", async () => {
      const t = now();
      await register(testManifest(alice, t, [testCapability("current", "Current.")]));
      const older = await register(testManifest(alice, t - 10, [testCapability("older", "Older.")]));
      expect(older.body).toEqual({ status: "superseded", address: alice.address, issuedAt: t });
      const sameTime = await register(testManifest(alice, t, [testCapability("rival", "Rival.")]));
      expect(sameTime.body.status).toBe("superseded");
      expect((await search("")).results.map((r) => r.capability.name)).toEqual(["current"]);
    });

    it("stores exactly one registration when the same seller registers concurrently", async () => {
      const envelopes = await Promise.all(
        [0, 1, 2, 3].map((i) =>
          signManifest(alice, testManifest(alice, now() - i, [testCapability(`v${i}`, "Version.")])),
        ),
      );
      const replies = await Promise.all(envelopes.map((e) => call("POST", "/sellers", e)));
      expect(replies.every((r) => r.status === 200 || r.status === 201)).toBe(true);
      const names = (await search("")).results.map((r) => r.capability.name);
      expect(names).toEqual(["v0"]);
    });
  });

  describe("removal", () => {
    it("removes a seller with its signature, and refuses a replay of its older registration", async () => {
      const envelope = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      await call("POST", "/sellers", envelope);
      clock.advance(1_000);
      const removal = await signSellerRemoval(alice, now());
      const removed = await call("DELETE", `/sellers/${alice.address}`, removal);
      expect(removed.status).toBe(200);
      expect(removed.body).toEqual({ status: "removed", address: alice.address, issuedAt: now() });
      expect((await call("GET", `/sellers/${alice.address}`)).status).toBe(404);
      expect((await search("")).results).toEqual([]);
      expect((await call("GET", "/sellers")).body.sellers).toEqual([]);

      const replay = await call("POST", "/sellers", envelope);
      expect(replay.body.status).toBe("superseded");
      expect((await call("GET", `/sellers/${alice.address}`)).status).toBe(404);

      clock.advance(1_000);
      const back = await register(testManifest(alice, now(), [testCapability("y", "Y.")]));
      expect(back.body.status).toBe("created");
      expect((await call("GET", "/sellers")).body.sellers).toHaveLength(1);
    });

    it("refuses a removal signed by another key, an unsigned one, and one for an unknown seller", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      const byBob = await signSellerRemoval(bob, now());
      const wrong = await call("DELETE", `/sellers/${alice.address}`, byBob);
      expect(wrong.status).toBe(422);
      expect(wrong.body.error.details.reason).toBe("wrong_signer");

      const unsigned = await call("DELETE", `/sellers/${alice.address}`, { issuedAt: now() });
      expect(unsigned.status).toBe(422);
      expect(unsigned.body.error.details.reason).toBe("missing_signature");

      const unknown = await call("DELETE", `/sellers/${bob.address}`, byBob);
      expect(unknown.status).toBe(404);
      expect((await call("GET", `/sellers/${alice.address}`)).status).toBe(200);
    });

    it("leaves a registration newer than the removal in place", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      const reply = await call(
        "DELETE",
        `/sellers/${alice.address}`,
        await signSellerRemoval(alice, now() - 5),
      );
      expect(reply.body).toEqual({ status: "superseded", address: alice.address, issuedAt: now() });
      expect((await call("GET", `/sellers/${alice.address}`)).status).toBe(200);
    });

    it("refuses a stale removal", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      clock.advance(700_000);
      const reply = await call(
        "DELETE",
        `/sellers/${alice.address}`,
        await signSellerRemoval(alice, now() - 601),
      );
      expect(reply.status).toBe(422);
      expect(reply.body.error.code).toBe("AuthorizationExpired");
    });
  });

  describe("catalog", () => {
    beforeEach(async () => {
      await register(
        testManifest(
          alice,
          now(),
          [
            testCapability("forecast", "Seven-day weather forecast for any city.", [
              { type: "one-time", amount: "20000" },
            ]),
            testCapability("historical_weather", "Daily weather observations since 1950.", [
              { type: "one-time", amount: "50000" },
              {
                type: "subscription",
                planId: "3",
                amount: "9000000",
                interval: 2_592_000,
                includedUnits: 0,
                overageUnitPrice: "0",
              },
            ]),
          ],
          { name: "Weather Desk", description: "Meteorology data." },
        ),
      );
      await register(
        testManifest(
          bob,
          now(),
          [
            testCapability("translate", "Translate text between languages.", [
              {
                type: "metered",
                planId: "7",
                amount: "1000000",
                interval: 2_592_000,
                includedUnits: 100,
                overageUnitPrice: "5000",
                unitsPerCall: 1,
              },
            ]),
            testCapability("summarize", "Summarize long text, such as weather reports.", [
              { type: "one-time", amount: "9007199254740993" },
            ]),
          ],
          { name: "Language Lab", description: "Text tools.", network: "eip155:84532" },
        ),
        bob,
      );
    });

    it("finds capabilities by words in names and descriptions, best match first", async () => {
      const weather = await search("q=weather");
      expect(weather.results.map((r) => r.capability.name)).toEqual([
        "historical_weather",
        "forecast",
        "summarize",
      ]);
      expect(weather.results[0]!.score).toBeGreaterThan(weather.results[1]!.score);

      // Every word must match; stems and prefixes match too.
      expect((await search("q=weather+forecasts")).results.map((r) => r.capability.name)).toEqual([
        "forecast",
      ]);
      expect((await search("q=translation")).results.map((r) => r.capability.name)).toEqual(["translate"]);
      expect((await search("q=summ")).results.map((r) => r.capability.name)).toEqual(["summarize"]);
      expect((await search("q=historicalWeather")).results.map((r) => r.capability.name)).toEqual([
        "historical_weather",
      ]);
      expect((await search("q=astronomy")).results).toEqual([]);
    });

    it("describes each result with its seller, URL, terms and cheapest per-call price", async () => {
      const [entry] = (await search("q=translate")).results;
      expect(entry).toMatchObject({
        seller: { address: bob.address, name: "Language Lab" },
        url: "http://127.0.0.1:5100/v1/translate",
        network: "eip155:84532",
        facilitator: "http://127.0.0.1:4020",
        price: "10000",
        capability: { name: "translate", method: "POST", path: "/v1/translate" },
      });
    });

    it("compares maxPrice exactly at the boundary, in atomic units and in USDC text", async () => {
      const names = async (q: string) => (await search(q)).results.map((r) => r.capability.name).sort();
      expect(await names("maxPrice=20000")).toEqual(["forecast", "translate"]);
      expect(await names("maxPrice=19999")).toEqual(["translate"]);
      expect(await names("maxPrice=0.02")).toEqual(["forecast", "translate"]);
      expect(await names("maxPrice=0.019999")).toEqual(["translate"]);
      expect(await names("maxPrice=9999")).toEqual([]);
      // Beyond 2^53, where a float could not tell the two apart.
      expect(await names("maxPrice=9007199254740993")).toHaveLength(4);
      expect(await names("maxPrice=9007199254740992")).toEqual([
        "forecast",
        "historical_weather",
        "translate",
      ]);
    });

    it("filters by pricing scheme and network, and pages", async () => {
      const names = async (q: string) => (await search(q)).results.map((r) => r.capability.name);
      expect(await names("scheme=subscription")).toEqual(["historical_weather"]);
      expect(await names("scheme=metered")).toEqual(["translate"]);
      expect(await names("network=eip155:84532&q=text")).toEqual(["translate", "summarize"]);
      // Without q, cheapest first.
      expect(await names("limit=2")).toEqual(["translate", "forecast"]);
      expect(await names("limit=2&offset=2")).toEqual(["historical_weather", "summarize"]);
    });

    it("refuses bad query parameters with 400", async () => {
      for (const query of [
        "maxPrice=1e6",
        "maxPrice=-1",
        "scheme=free",
        "limit=0",
        "limit=101",
        "network=base",
      ]) {
        const reply = await call("GET", `/catalog?${query}`);
        expect(reply.status, query).toBe(400);
        expect(reply.body.error.code, query).toBe("InvalidRequest");
      }
      expect((await call("GET", `/catalog?q=${"a".repeat(201)}`)).status).toBe(400);
      expect((await call("GET", "/sellers/0x1234")).status).toBe(400);
    });

    it("never answers 500 for any q or maxPrice", async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.string({ unit: "grapheme", maxLength: 60 }),
          fc.string({ maxLength: 12 }),
          async (q, max) => {
            const reply = await app.request(`/catalog?${new URLSearchParams({ q, maxPrice: max })}`);
            expect(reply.status === 200 || reply.status === 400).toBe(true);
          },
        ),
        { numRuns: 150 },
      );
    });

    it("treats a query of stop words only as no filter", async () => {
      expect((await search("q=the")).results).toHaveLength(4);
    });
  });

  describe("refresh", () => {
    it("re-reads the seller's signed manifest from its baseUrl, without the freshness window", async () => {
      await register(testManifest(alice, now(), [testCapability("old", "Old.")]));
      clock.advance(3_600_000);
      const newer = await signManifest(
        alice,
        testManifest(alice, now() - 1800, [testCapability("new", "New.")]),
      );
      serveSeller("http://127.0.0.1:5100", () => newer);
      const reply = await call("POST", "/sellers/refresh", { address: alice.address });
      expect(reply.status).toBe(200);
      expect(reply.body.status).toBe("updated");
      expect((await search("")).results.map((r) => r.capability.name)).toEqual(["new"]);

      const again = await call("POST", "/sellers/refresh", { address: alice.address });
      expect(again.status).toBe(429);
      expect(again.headers.get("retry-after")).toBe("60");
      clock.advance(60_000);
      expect((await call("POST", "/sellers/refresh", { address: alice.address })).body.status).toBe(
        "unchanged",
      );
    });

    it("refuses an unsigned document and another seller's manifest", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      serveSeller("http://127.0.0.1:5100", () => testManifest(alice, now() + 1, [testCapability("y", "Y.")]));
      const unsigned = await call("POST", "/sellers/refresh", { address: alice.address });
      expect(unsigned.status).toBe(400);

      clock.advance(60_000);
      const bobs = await signManifest(bob, testManifest(bob, now(), [testCapability("y", "Y.")]));
      serveSeller("http://127.0.0.1:5100", () => bobs);
      const other = await call("POST", "/sellers/refresh", { address: alice.address });
      expect(other.status).toBe(422);
      expect(other.body.error.details.reason).toBe("wrong_seller");
      expect((await search("")).results.map((r) => r.capability.name)).toEqual(["x"]);
    });

    it("answers 503 when the seller cannot be reached and 404 for unknown sellers", async () => {
      await register(
        testManifest(carol, now(), [testCapability("x", "X.")], { baseUrl: "http://10.9.9.9" }),
        carol,
      );
      const down = await call("POST", "/sellers/refresh", { address: carol.address });
      expect(down.status).toBe(503);
      expect(down.body.error.details.reason).toBe("seller_unreachable");
      expect((await call("POST", "/sellers/refresh", { address: dave.address })).status).toBe(404);
    });

    it("is not offered by a market without fetch", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      const plain = createMarket({ store, clock, logger });
      const reply = await plain.request("/sellers/refresh", {
        method: "POST",
        body: JSON.stringify({ address: alice.address }),
        headers: { "content-type": "application/json" },
      });
      expect(reply.status).toBe(404);
    });
  });

  describe("liveness", () => {
    const names = async () => (await search("")).results.map((r) => r.capability.name);

    it("stops offering a seller after two failed checks and offers it again once it answers", async () => {
      const signed = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      expect((await call("POST", "/sellers", signed)).status).toBe(201);
      serveSeller("http://127.0.0.1:5100", () => signed);
      expect(await liveness.sweep()).toEqual([
        { address: alice.address.toLowerCase(), reachable: true, failures: 0, checkedAt: now() },
      ]);
      expect(await liveness.sweep()).toEqual([]); // next check in 300 s

      sellerSites.delete("http://127.0.0.1:5100");
      clock.advance(300_000);
      expect(await liveness.sweep()).toMatchObject([
        { reachable: true, failures: 1, lastError: "unreachable" },
      ]);
      expect(await names()).toEqual(["x"]); // one failure is a blip, not a departure

      clock.advance(30_000);
      const down = now();
      expect(await liveness.sweep()).toMatchObject([
        { reachable: false, failures: 2, unreachableSince: down },
      ]);
      expect(await names()).toEqual([]);
      // Still registered, and marked as such.
      const listed = await call("GET", "/sellers");
      expect(listed.body.sellers[0].liveness).toEqual({
        reachable: false,
        failures: 2,
        checkedAt: down,
        unreachableSince: down,
        lastError: "unreachable",
      });
      expect((await call("GET", `/sellers/${alice.address}`)).body.liveness.reachable).toBe(false);

      clock.advance(59_000);
      expect(await liveness.sweep()).toEqual([]); // back-off: 60 s after the second failure
      serveSeller("http://127.0.0.1:5100", () => signed);
      clock.advance(1_000);
      expect(await liveness.sweep()).toMatchObject([{ reachable: true, failures: 0 }]);
      expect(await names()).toEqual(["x"]);
    });

    it("checks a reported seller at once, at most once per 30 s, and never delists on a report alone", async () => {
      const signed = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      await call("POST", "/sellers", signed);
      serveSeller("http://127.0.0.1:5100", () => signed);
      const answered = await call("POST", "/sellers/report", { address: alice.address });
      expect(answered.status).toBe(200);
      expect(answered.body).toMatchObject({
        address: alice.address,
        checked: true,
        reachable: true,
        failures: 0,
      });

      sellerSites.clear();
      const early = await call("POST", "/sellers/report", { address: alice.address });
      expect(early.body).toMatchObject({ checked: false, reachable: true });
      expect(fetched).toHaveLength(1);

      clock.advance(30_000);
      expect((await call("POST", "/sellers/report", { address: alice.address })).body).toMatchObject({
        checked: true,
        reachable: true,
        failures: 1,
      });
      clock.advance(30_000);
      expect((await call("POST", "/sellers/report", { address: alice.address })).body).toMatchObject({
        checked: true,
        reachable: false,
        failures: 2,
      });
      expect(await names()).toEqual([]);

      expect((await call("POST", "/sellers/report", { address: bob.address })).status).toBe(404);
      expect((await call("POST", "/sellers/report", { address: "nobody" })).status).toBe(400);
    });

    it("runs a bounded number of report checks at once; the others answer with what is known", async () => {
      let release: () => void = () => undefined;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      let started: () => void = () => undefined;
      const fetching = new Promise<void>((resolve) => {
        started = resolve;
      });
      const slow = createMarketService({
        store,
        clock,
        logger,
        fetch: async (input, init) => {
          started();
          await held;
          return fetchSeller(input, init);
        },
        sellerTargets: { allowTargets: ["127.0.0.0/8"] },
        liveness: { reportConcurrency: 1 },
      });
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      await register(testManifest(bob, now(), [testCapability("y", "Y.")]), bob);
      const first = slow.liveness!.report(alice.address);
      await fetching;
      expect(await slow.liveness!.report(bob.address)).toMatchObject({ checked: false, reachable: true });
      release();
      expect(await first).toMatchObject({ checked: true, failures: 1 });
      expect(await slow.liveness!.report(bob.address)).toMatchObject({ checked: true, failures: 1 });
    });

    it("puts an unreachable seller back on offer when a refresh reads its manifest", async () => {
      const signed = await signManifest(alice, testManifest(alice, now(), [testCapability("x", "X.")]));
      await call("POST", "/sellers", signed);
      await liveness.sweep();
      clock.advance(30_000);
      await call("POST", "/sellers/report", { address: alice.address });
      expect(await names()).toEqual([]);
      serveSeller("http://127.0.0.1:5100", () => signed);
      expect((await call("POST", "/sellers/refresh", { address: alice.address })).body.status).toBe(
        "unchanged",
      );
      expect(await names()).toEqual(["x"]);
    });

    it("does not count a server answering for another seller", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      const bobs = await signManifest(bob, testManifest(bob, now(), [testCapability("y", "Y.")]));
      serveSeller("http://127.0.0.1:5100", () => bobs);
      expect(await liveness.sweep()).toMatchObject([{ failures: 1, lastError: "wrong_seller" }]);
    });

    it("starts afresh when the seller registers a new manifest", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      await liveness.sweep();
      clock.advance(30_000);
      await call("POST", "/sellers/report", { address: alice.address });
      expect(await names()).toEqual([]);
      await register(testManifest(alice, now(), [testCapability("z", "Z.")], { baseUrl: "http://10.1.1.1" }));
      expect(await names()).toEqual(["z"]);
      expect((await call("GET", `/sellers/${alice.address}`)).body.liveness).toEqual({
        reachable: true,
        failures: 0,
        checkedAt: now(),
      });
    });

    it("never fetches loopback, link-local or private sellers unless allowed", async () => {
      const service = createMarketService({
        store,
        clock,
        logger,
        fetch: fetchSeller,
        sellerTargets: {
          lookup: async (host) => [
            { address: host === "metadata.internal" ? "169.254.169.254" : "10.0.0.7", family: 4 },
          ],
        },
      });
      await register(testManifest(alice, now(), [testCapability("x", "X.")])); // 127.0.0.1
      await register(
        testManifest(bob, now(), [testCapability("y", "Y.")], { baseUrl: "http://metadata.internal" }),
        bob,
      );
      await register(
        testManifest(carol, now(), [testCapability("z", "Z.")], { baseUrl: "http://[::ffff:10.0.0.1]:8080" }),
        carol,
      );
      serveSeller("http://127.0.0.1:5100", () => ({}));
      const results = await service.liveness!.sweep();
      expect(results).toHaveLength(3);
      for (const result of results)
        expect(result).toMatchObject({ failures: 1, lastError: "refused_target" });
      expect(fetched).toEqual([]);

      const refresh = await service.app.request("/sellers/refresh", {
        method: "POST",
        body: JSON.stringify({ address: bob.address }),
        headers: { "content-type": "application/json" },
      });
      expect(refresh.status).toBe(400);
      expect((await refresh.json()).error.details).toMatchObject({
        reason: "refused_target",
        target: "private_address",
      });
      expect(fetched).toEqual([]);
    });

    it("has no report endpoint on a market that does not fetch sellers", async () => {
      await register(testManifest(alice, now(), [testCapability("x", "X.")]));
      const plain = createMarket({ store, clock, logger });
      const reply = await plain.request("/sellers/report", {
        method: "POST",
        body: JSON.stringify({ address: alice.address }),
        headers: { "content-type": "application/json" },
      });
      expect(reply.status).toBe(404);
      expect((await call("GET", `/sellers/${alice.address}`)).body.liveness).toEqual({
        reachable: true,
        failures: 0,
      });
    });
  });

  it("reports health", async () => {
    const reply = await call("GET", "/healthz");
    expect(reply.status).toBe(200);
    expect(reply.body.status).toBe("ok");
  });
}

describe("market on PGlite", () => marketSuite(undefined));
describe.runIf(process.env.DATABASE_URL)("market on PostgreSQL", () => marketSuite(process.env.DATABASE_URL));
