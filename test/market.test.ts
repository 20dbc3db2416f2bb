/**
 * The market end to end over real sockets: `serveMarket` on PGlite and (with DATABASE_URL) PostgreSQL,
 * a seller's own server publishing its signed manifest, and the `tollgate seller` / `tollgate market`
 * commands with the real `fetch`. A last suite starts `tollgate market` as its own process.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { marketCommand } from "../src/cli/commands/market.ts";
import { sellerCommand } from "../src/cli/commands/seller.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { serveMarket } from "../src/market/createMarket.ts";
import { pinnedSellerFetch } from "../src/market/fetchSellerDocument.ts";
import type { CatalogEntry } from "../src/market/marketApi.ts";
import { createMarketClient } from "../src/market/marketClient.ts";
import { testCapability, testManifest, testSellers } from "../src/market/testManifests.ts";
import { createFixedClock, unixSeconds } from "../src/protocol/clock.ts";
import { MANIFEST_PATH, signManifest, verifyManifestSignature } from "../src/protocol/manifest.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";

const [alice, bob] = testSellers as [(typeof testSellers)[number], (typeof testSellers)[number]];
const logger = pino({ level: "silent" });

function capture() {
  const lines: string[] = [];
  const errors: string[] = [];
  return { lines, errors, out: { log: (l: string) => lines.push(l), error: (l: string) => errors.push(l) } };
}

/** A `.tollgate/devnet.json` naming alice's key, as `tollgate devnet up` would write it. */
function writeDevnetFile(dir: string): void {
  writeFileSync(
    join(dir, "devnet.json"),
    JSON.stringify({
      rpcUrl: "http://127.0.0.1:8545",
      chainId: 31337,
      network: "eip155:31337",
      pid: 1,
      contracts: {
        usd: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        subscriptionManager: "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
        batchSettler: "0xCf7Ed3AccA5a467e9e704C703E8D87F634fB0Fc9",
      },
      accounts: [{ address: alice.address, privateKey: alicePrivateKey }],
    }),
  );
}
// anvil's development key #1 (alice in testSellers): a public test key.
const alicePrivateKey = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

function endToEnd(databaseUrl: string | undefined) {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-market-"));
  const clock = createFixedClock(1_763_800_000_000);
  let store: Store;
  let market: RunningServer;
  let site: RunningServer;
  let deps: { env: Record<string, string>; fetch: typeof fetch; clock: typeof clock };

  beforeAll(async () => {
    store = await createTestStore({ databaseUrl, logger });
    // The seller's server is on this machine: allowed here, as `--allow-targets 127.0.0.0/8` does.
    market = await serveMarket({
      store,
      clock,
      logger,
      fetch: pinnedSellerFetch,
      sellerTargets: { allowTargets: ["127.0.0.0/8"] },
      liveness: { sweepSeconds: 0 },
    });
    // bob's own server: publishes his signed manifest where buyers and markets look for it.
    const app = new Hono();
    let published: unknown;
    app.get(MANIFEST_PATH, (c) => c.json(published as object));
    site = await serveApp(app);
    published = await signManifest(
      bob,
      testManifest(
        bob,
        unixSeconds(clock),
        [testCapability("translate", "Translate text between languages.")],
        {
          name: "Language Lab",
          baseUrl: site.url,
        },
      ),
    );
    writeDevnetFile(dir);
    deps = { env: { TOLLGATE_MARKET_URL: market.url, TOLLGATE_DIR: dir }, fetch, clock };
  }, 180_000);
  afterAll(async () => {
    await market?.close();
    await site?.close();
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("registers a manifest file with the devnet key of its payTo, and one served already signed", async () => {
    const file = join(dir, "forecast.json");
    const manifest = testManifest(alice, 0, [
      testCapability("forecast", "Seven-day weather forecast for a city.", [
        { type: "one-time", amount: "20000" },
      ]),
    ]);
    writeFileSync(file, JSON.stringify(manifest));
    const first = capture();
    expect(await sellerCommand(["register", file], { ...deps, out: first.out })).toBe(0);
    expect(first.lines).toEqual([
      `created: ${alice.address} on ${market.url} (issuedAt ${unixSeconds(clock)})`,
    ]);

    const fromUrl = capture();
    expect(
      await sellerCommand(["register", `${site.url}${MANIFEST_PATH}`], { ...deps, out: fromUrl.out }),
    ).toBe(0);
    expect(fromUrl.lines[0]).toMatch(/^created: 0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC /);

    const list = capture();
    expect(await sellerCommand(["list", "--json"], { ...deps, out: list.out })).toBe(0);
    expect((JSON.parse(list.lines[0]!) as { address: string }[]).map((s) => s.address).sort()).toEqual(
      [alice.address, bob.address].sort(),
    );
  });

  it("finds capabilities with the client and with `tollgate market search`, priced exactly", async () => {
    const client = createMarketClient({ url: market.url, fetch });
    const found = await client.search({ q: "forecast weather", maxPrice: "0.02" });
    expect(found.results.map((r: CatalogEntry) => r.capability.name)).toEqual(["forecast"]);
    expect((await client.search({ q: "forecast", maxPrice: 19_999n })).results).toEqual([]);

    const search = capture();
    expect(await marketCommand(["search", "translate"], { ...deps, out: search.out })).toBe(0);
    expect(search.lines[0]).toBe(`translate  0.02 USDC/call (one-time)  POST ${site.url}/v1/translate`);

    const seller = await client.get(bob.address);
    expect(seller?.manifest.baseUrl).toBe(site.url);
    expect(await verifyManifestSignature(seller!.envelope)).toMatchObject({ valid: true });
  });

  it("refreshes from the seller's server and removes a registration with the payout key", async () => {
    const refresh = capture();
    expect(await sellerCommand(["refresh", bob.address], { ...deps, out: refresh.out })).toBe(0);
    expect(refresh.lines[0]).toMatch(/^unchanged: /);

    clock.advance(1_000);
    const removal = capture();
    expect(await sellerCommand(["remove", "--account", "0"], { ...deps, out: removal.out })).toBe(0);
    expect(removal.lines).toEqual([`removed: ${alice.address} on ${market.url}`]);
    const client = createMarketClient({ url: market.url, fetch });
    expect(await client.get(alice.address)).toBeUndefined();
    expect((await client.search({ q: "forecast" })).results).toEqual([]);
  });

  it("reports a refused registration as the market's error code", async () => {
    const file = join(dir, "other.json");
    writeFileSync(file, JSON.stringify(testManifest(bob, 0, [testCapability("x", "X.")])));
    // alice's key cannot sign for bob's payout address.
    await expect(
      sellerCommand(["register", file, "--account", "0"], { ...deps, out: capture().out }),
    ).rejects.toMatchObject({ code: "InvalidRequest" });
    writeFileSync(file, JSON.stringify({ manifest: testManifest(bob, 0, [testCapability("x", "X.")]) }));
    await expect(sellerCommand(["register", file], { ...deps, out: capture().out })).rejects.toMatchObject({
      code: "InvalidSignature",
    });
  });
}

describe("market end to end on PGlite", () => endToEnd(undefined));
describe.runIf(process.env.DATABASE_URL)("market end to end on PostgreSQL", () =>
  endToEnd(process.env.DATABASE_URL),
);

describe("tollgate market as a process", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-market-cli-"));
  let child: ChildProcess | undefined;

  afterAll(() => {
    if (child?.exitCode === null) child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });

  it("serves on PGlite under --dir, takes a registration, and stops cleanly on SIGTERM", async () => {
    // PGlite, whatever this machine's DATABASE_URL says.
    const env = {
      ...Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== "DATABASE_URL")),
      LOG_LEVEL: "silent",
    };
    const started = spawn(
      process.execPath,
      ["--import", "tsx", "src/cli/main.ts", "market", "--port", "0", "--dir", dir],
      { env, stdio: ["ignore", "pipe", "pipe"] },
    );
    child = started;
    const exited = new Promise<number | null>((done) => started.once("exit", (code) => done(code)));
    let output = "";
    const url = await new Promise<string>((done, fail) => {
      // JSON log lines on stdout, the human status line on stderr.
      const read = (chunk: Buffer) => {
        output += chunk.toString();
        const match = /market listening on (http:\/\/\S+)/.exec(output);
        if (match !== null) done(match[1]!);
      };
      started.stdout?.on("data", read);
      started.stderr?.on("data", read);
      void exited.then((code) => fail(new Error(`tollgate market exited with ${code}: ${output}`)));
    });
    expect(output).toContain(`PGlite in ${join(dir, "market")}`);

    // The market process runs on the wall clock, so the manifest must be fresh by it.
    const clock = createFixedClock(Date.now());
    const client = createMarketClient({ url, fetch });
    const envelope = await signManifest(
      alice,
      testManifest(alice, unixSeconds(clock), [testCapability("forecast", "Weather forecast.")]),
    );
    expect((await client.register(envelope)).status).toBe("created");
    expect((await client.search({ q: "weather" })).results).toHaveLength(1);

    started.kill("SIGTERM");
    expect(await exited).toBe(0);
    // A new PGlite directory is initialized on first start: tens of seconds on a busy two-core machine.
  }, 180_000);
});
