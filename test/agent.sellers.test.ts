/**
 * Sellers as buyers meet them, over a real devnet, facilitator, market and specialists on sockets:
 * - remote tool manifests (`tools/*.json`) become paid tools through `discoverTools`, found through a
 *   seller's manifest URL or a market;
 * - a seller that goes away gives its buyers `SellerUnreachable`, the market stops offering it once
 *   its own check confirms the report, and offers it again when it answers;
 * - a metered capability's `units(input)` decides the units each call draws from the allowance.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { summarizer } from "../agents/summarizer.ts";
import {
  createBudgetLedger,
  createSpecialist,
  defineCapability,
  discoverTools,
  loadTool,
  type PaidToolReceipt,
  type Specialist,
  type SpecialistPlan,
} from "../src/agent/index.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { registerProvider } from "../src/client/registerProvider.ts";
import type { RunningServer } from "../src/facilitator/createFacilitator.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { serveMarket } from "../src/market/createMarket.ts";
import { pinnedSellerFetch } from "../src/market/fetchSellerDocument.ts";
import { createMarketClient } from "../src/market/marketClient.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { getSubscriptionInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const logger = pino({ level: "silent" });
let devnet: Devnet;
let tf: TestFacilitator;
let market: RunningServer;
let summarizerSeller: Specialist;
let tallySeller: Specialist;
let toolsDir: string;
const TEXT = "Tollgate charges per request. Agents buy tools. Budgets keep spending bounded. The end.";

/** Counts words: one metered unit per word. */
const tally = defineCapability({
  name: "tally",
  description: "Counts the words of a text.",
  input: z.object({ text: z.string().max(10_000) }),
  output: z.object({ words: z.number() }),
  pricing: [
    {
      type: "subscription",
      plan: { price: "0.05", interval: 30 * 86_400, includedUnits: 2, overageUnitPrice: "0.001" },
    },
  ],
  units: ({ text }) => text.split(/\s+/).filter((w) => w !== "").length,
  handler: async ({ text }) => ({ words: text.split(/\s+/).filter((w) => w !== "").length }),
});

function startSummarizer(port = 0) {
  const specialist = createSpecialist({
    name: "summarizer",
    account: devnet.accounts[2]!.account,
    capabilities: [summarizer],
    facilitator: tf.url,
    network: devnet.network,
    token: devnet.contracts.usd,
    market: market.url,
    port,
  });
  return specialist;
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  tf = await startTestFacilitator(devnet);
  market = await serveMarket({
    store: tf.store,
    clock: systemClock,
    logger,
    // Everything runs on loopback here, as on a developer's machine with `tollgate market`.
    fetch: pinnedSellerFetch,
    sellerTargets: { allowTargets: ["127.0.0.0/8"] },
    // No schedule (the test drives checks through reports); one failed check marks a seller.
    liveness: { sweepSeconds: 0, unreachableAfterFailures: 1, reportIntervalSeconds: 1 },
  });
  summarizerSeller = startSummarizer();
  await summarizerSeller.start();

  // The metered seller: its plan on chain, the facilitator as its operator, an API key for usage.
  const owner = devnet.accounts[3]!;
  const wallet = devnet.walletClient(owner);
  const planHash = await createPlan(wallet, {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: 50_000n,
    interval: BigInt(30 * 86_400),
    includedUnits: 2n,
    overageUnitPrice: 1_000n,
  });
  const plan: SpecialistPlan = {
    planId: getPlanIdFromReceipt(
      await devnet.publicClient.waitForTransactionReceipt({ hash: planHash }),
    ).toString(),
    amount: 50_000n,
    interval: 30 * 86_400,
    includedUnits: 2,
    overageUnitPrice: 1_000n,
    manager: devnet.contracts.subscriptionManager,
  };
  await devnet.publicClient.waitForTransactionReceipt({
    hash: await setOperator(wallet, {
      manager: devnet.contracts.subscriptionManager,
      operator: devnet.accounts[devnet.accounts.length - 1]!.address,
      allowed: true,
    }),
  });
  const { apiKey } = await registerProvider(createFacilitatorClient({ url: tf.url, fetch }), owner.account);
  tallySeller = createSpecialist({
    name: "tally-desk",
    account: owner.account,
    capabilities: [tally],
    plans: { tally: plan },
    providerApiKey: apiKey,
    facilitator: tf.url,
    network: devnet.network,
    token: devnet.contracts.usd,
    market: market.url,
  });
  await tallySeller.start();

  // A tools directory as a user writes one: a remote tool by manifest URL and one found in the market.
  toolsDir = mkdtempSync(join(tmpdir(), "tollgate-tools-"));
  writeFileSync(
    join(toolsDir, "digest.json"),
    JSON.stringify({
      kind: "remote",
      name: "digest",
      description: "Summarize a text (bought from the summarizer).",
      capability: "summarize",
      manifestUrl: `${summarizerSeller.url}/.well-known/tollgate.json`,
      maxPrice: "0.05",
    }),
  );
  writeFileSync(
    join(toolsDir, "summary.json"),
    JSON.stringify({ kind: "remote", name: "summary", capability: "summarize", market: market.url }),
  );
  writeFileSync(
    join(toolsDir, "word-count.json"),
    JSON.stringify({ kind: "local", name: "word-count", module: "./nothing.ts", export: "nothing" }),
  );
}, 180_000);

afterAll(async () => {
  await summarizerSeller?.stop();
  await tallySeller?.stop();
  await market?.close();
  await tf?.stop();
  await devnet?.stop();
  if (toolsDir !== undefined) rmSync(toolsDir, { recursive: true, force: true });
});

async function newAgent(name: string) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 1_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total: 500_000n });
  return { account, payer, budget };
}

describe("remote tool manifests", () => {
  it("become paid tools through discoverTools, by manifest URL and through a market", async () => {
    const { payer, budget } = await newAgent("manifest-agent");
    const loaded = await loadTool("digest", { dir: toolsDir });
    expect(loaded.kind).toBe("remote");
    const [digest] = await discoverTools({ tools: [loaded], agent: "manifest-agent", payer, budget });
    expect(digest!.tool.name).toBe("digest");
    // The manifest's description, then the listed price the tool states for the model.
    expect(digest!.tool.description).toMatch(
      /^Summarize a text \(bought from the summarizer\)\. Price: 0\.02 USDC/,
    );
    expect(digest!.seller).toBe(summarizerSeller.payTo);
    const message = await digest!.tool.invoke({
      type: "tool_call",
      id: "c1",
      name: "digest",
      args: { text: TEXT },
    });
    expect(String(message.content)).toContain("summary");
    expect(message.artifact).toMatchObject({ mode: "one-time", amount: "0.02" });

    // The whole directory: its remote manifests, local ones left to loadTool.
    const all = await discoverTools({ toolsDir, agent: "manifest-agent", payer, budget });
    expect(all.map((t) => t.tool.name).sort()).toEqual(["digest", "summary"]);
    expect(all.find((t) => t.tool.name === "summary")!.capability.url).toBe(
      `${summarizerSeller.url}/summarize`,
    );
  });

  it("refuses a manifest whose seller is dearer than its maxPrice, or sells no such capability", async () => {
    const { payer, budget } = await newAgent("picky-agent");
    const tooDear = {
      kind: "remote" as const,
      name: "cheap-digest",
      capability: "summarize",
      manifestUrl: summarizerSeller.url!,
      maxPrice: "0.01",
    };
    await expect(
      discoverTools({ tools: [tooDear], agent: "picky-agent", payer, budget }),
    ).rejects.toMatchObject({
      code: "PriceCeilingExceeded",
    });
    const inMarket = {
      kind: "remote" as const,
      name: "cheap",
      capability: "summarize",
      market: market.url,
      maxPrice: "0.01",
    };
    await expect(
      discoverTools({ tools: [inMarket], agent: "picky-agent", payer, budget }),
    ).rejects.toMatchObject({
      code: "NotFound",
    });
    const missing = {
      kind: "remote" as const,
      name: "translate",
      capability: "translate",
      manifestUrl: summarizerSeller.url!,
    };
    await expect(
      discoverTools({ tools: [missing], agent: "picky-agent", payer, budget }),
    ).rejects.toMatchObject({
      code: "NotFound",
    });
  });
});

describe("a seller the facilitator cannot settle for", () => {
  it("fails at start, not at its first buyer, and leaves nothing listening", async () => {
    const stray = "0x000000000000000000000000000000000000dEaD" as const;
    const specialist = createSpecialist({
      name: "stray-token",
      account: devnet.accounts[5]!.account,
      capabilities: [summarizer],
      facilitator: tf.url,
      network: devnet.network,
      token: stray,
    });
    await expect(specialist.start()).rejects.toMatchObject({
      code: "InvalidRequest",
      message: expect.stringContaining("does not settle the token"),
    });
    expect(specialist.url).toBeUndefined();
  });
});

describe("a seller that goes away", () => {
  it("gives buyers SellerUnreachable, is reported, left out of the catalog, and offered again when back", async () => {
    const { payer, budget } = await newAgent("loyal-agent");
    const client = createMarketClient({ url: market.url, fetch });
    const tools = await discoverTools({ market: client, agent: "loyal-agent", payer, budget, logger });
    const summarize = tools.find((t) => t.tool.name === "summarize")!.tool;
    const url = summarizerSeller.url!;
    const port = Number(new URL(url).port);

    await summarizerSeller.stop();
    const message = await summarize.invoke({
      type: "tool_call",
      id: "c2",
      name: "summarize",
      args: { text: TEXT },
    });
    // Refused, or closed when a kept-alive connection from an earlier call was reused.
    expect(String(message.content)).toMatch(
      new RegExp(`^ERROR SellerUnreachable: the seller at ${url} (refused|closed) the connection$`),
    );
    expect(message.artifact as PaidToolReceipt).toMatchObject({
      amount: "0",
      paid: false,
      error: { code: "SellerUnreachable" },
    });
    expect((await budget.report("loyal-agent")).spent.total).toBe(0n);

    // discoverTools reported it; the market checked it itself and no longer offers it.
    await vi.waitFor(
      async () => {
        const seller = (await client.list()).sellers.find((s) => s.address === summarizerSeller.payTo);
        expect(seller?.liveness).toMatchObject({ reachable: false, lastError: "unreachable" });
      },
      { timeout: 30_000, interval: 100 },
    );
    const offered = await discoverTools({ market: client, agent: "loyal-agent", payer, budget });
    expect(offered.map((t) => t.tool.name)).not.toContain("summarize");

    // Back on its old address: the next check finds it, and buyers find it again.
    summarizerSeller = startSummarizer(port);
    await summarizerSeller.start();
    await vi.waitFor(
      async () => {
        expect((await client.report(summarizerSeller.payTo)).reachable).toBe(true);
      },
      { timeout: 30_000, interval: 1_100 },
    );
    const again = await discoverTools({ market: client, agent: "loyal-agent", payer, budget });
    expect(again.map((t) => t.tool.name)).toContain("summarize");
  }, 120_000);
});

describe("metered units decided by the capability", () => {
  it("draws units(input) from the allowance per call, and refuses malformed input before charging", async () => {
    const { account } = await newAgent("tally-agent");
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
    const paidFetch = fetchWithPayment(fetch, payer, {
      maxPrice: "0.1",
      choose: async (options) => options.find((o) => o.scheme === "subscription"),
      subscription: { maxOverage: "1" },
    });
    const call = (text: unknown) =>
      paidFetch(`${tallySeller.url}/tally`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ text }),
      });
    const first = await call("one two three four five");
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ words: 5 });
    expect((await call("six seven eight")).status).toBe(200);
    const bad = await call(42);
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.code).toBe("InvalidRequest");

    // 5 + 3 units, 2 included: 6 units of overage at 0.001 USDC reach the chain.
    const id = payer.subscriptions!.forOrigin(new URL(tallySeller.url!).origin)!.subscriptionId;
    await tallySeller.flushUsage();
    await vi.waitFor(
      async () => {
        expect(BigInt((await getSubscriptionInfo(payer.facilitator, id)).overageUsed)).toBe(6_000n);
      },
      { timeout: 30_000, interval: 200 },
    );
  }, 120_000);
});
