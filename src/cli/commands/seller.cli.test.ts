/**
 * `tollgate seller register | refresh` as its own process, against a market and a seller's server:
 * a seller's base URL is enough (the manifest is found at /.well-known/tollgate.json), what the seller
 * serves is registered as the seller signed it (so refreshes agree), and a refresh the market refuses
 * as "superseded" says what superseded it and what to do.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import pino from "pino";
import { privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../../test/support/runCli.ts";
import { type RunningServer, serveApp } from "../../facilitator/createFacilitator.ts";
import { serveMarket } from "../../market/createMarket.ts";
import { testCapability, testManifest } from "../../market/testManifests.ts";
import { systemClock, unixSeconds } from "../../protocol/clock.ts";
import { MANIFEST_PATH, signManifest } from "../../protocol/manifest.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";

// anvil's development key #7: a public test key, a seller no other market suite uses.
const sellerKey = "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356";

let store: Store;
let market: RunningServer;
let site: RunningServer;
let dir: string;
const seller = privateKeyToAccount(sellerKey);
/** What the seller's server publishes; replaced to play a seller that restarted. */
let published: unknown;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "tollgate-seller-cli-"));
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  // The market refreshes from sellers on this machine, as a local market does.
  market = await serveMarket({
    store,
    clock: systemClock,
    logger: pino({ level: "silent" }),
    fetch,
    sellerTargets: { allowTargets: ["127.0.0.0/8", "::1"] },
    // Refreshes of one seller follow each other within seconds here.
    refreshIntervalSeconds: 1,
  });
  const app = new Hono();
  app.get(MANIFEST_PATH, (c) => c.json(published as object));
  site = await serveApp(app);
  // Signed a minute ago, as a seller that has been up for a while.
  published = await signManifest(
    seller,
    testManifest(seller, unixSeconds(systemClock) - 60, [testCapability("haiku", "Writes a haiku.")], {
      name: "Haiku House",
      baseUrl: site.url,
    }),
  );
}, 120_000);

afterAll(async () => {
  await market?.close();
  await site?.close();
  await store?.close();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

const seller_ = (...args: string[]) =>
  runCli(["seller", ...args], { env: { TOLLGATE_DIR: dir, TOLLGATE_MARKET_URL: market.url } });

describe("tollgate seller as a process", { timeout: 180_000 }, () => {
  it("registers a seller from its base URL, as the seller signed it, and a refresh then agrees", async () => {
    const registered = await seller_("register", `${site.url}/`);
    expect(registered.stderr).toBe("");
    expect(registered.code).toBe(0);
    expect(registered.stdout).toContain(`created: ${seller.address} on ${market.url}`);
    expect(registered.stdout).toContain(`as signed by the seller (${site.url}${MANIFEST_PATH})`);

    // The manifest URL itself is accepted too, and is the same registration.
    const again = await seller_("register", `${site.url}${MANIFEST_PATH}`);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`unchanged: ${seller.address}`);

    const refresh = await seller_("refresh", seller.address);
    expect(refresh.stderr).toBe("");
    expect(refresh.code).toBe(0);
    expect(refresh.stdout).toContain(`unchanged: ${seller.address}`);
  });

  it("explains a superseded refresh: what superseded it, and what to do", async () => {
    // Signed afresh by the payout key: the market now holds a manifest newer than the seller serves.
    const resigned = await seller_("register", site.url, "--key", sellerKey);
    expect(resigned.code).toBe(0);
    expect(resigned.stdout).toContain(`updated: ${seller.address}`);

    const refresh = await seller_("refresh", seller.address);
    expect(refresh.code).toBe(1);
    expect(refresh.stdout).toBe("");
    expect(refresh.stderr).toContain("superseded: nothing changed.");
    expect(refresh.stderr).toContain(`${site.url}${MANIFEST_PATH} was signed at`);
    expect(refresh.stderr).toContain("is not newer than the registration");
    expect(refresh.stderr).toContain("tollgate seller register");
    expect(refresh.stderr).toContain("restart it");

    // The seller restarts and signs anew: the refresh takes it.
    published = await signManifest(
      seller,
      testManifest(seller, unixSeconds(systemClock) + 1, [testCapability("haiku", "Writes a haiku.")], {
        name: "Haiku House",
        baseUrl: site.url,
      }),
    );
    const after = await seller_("refresh", seller.address);
    expect(after.stderr).toBe("");
    expect(after.stdout).toContain(`updated: ${seller.address}`);
  });

  it("says when a base URL is not a Tollgate seller", async () => {
    const app = new Hono();
    const other = await serveApp(app);
    try {
      const result = await seller_("register", other.url);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`${other.url}${MANIFEST_PATH} answered 404`);
      expect(result.stderr).toContain("a Tollgate seller?");
    } finally {
      await other.close();
    }
  });
});
