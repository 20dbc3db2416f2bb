/**
 * A multi-unit metered capability bought by an agent on a real devnet: the gate tells the subscriber
 * what each call counted and was charged (`X-Tollgate-Units`, `X-Tollgate-Overage`), the paid tool
 * records exactly that in the budget, and once the usage has settled on chain the agent's ledger
 * equals what the wallet lost — the watcher's sync adding nothing twice. A seller that sends no such
 * headers is recorded at its listed units per call. The approval hook is asked once per subscription.
 */
import type { ToolMessage } from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { Hono } from "hono";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { type ApprovalRequest, createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { listingOf } from "../src/agent/offerCheck.ts";
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { type PaymentGate, type PaymentGateControls, paymentGate } from "../src/gate/paymentGate.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { HeaderName } from "../src/protocol/header.ts";
import {
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
  UsageSummarySchema,
} from "../src/protocol/subscriptions.ts";
import { createSubscriptionKeeper } from "../src/schemes/subscription/agent/createSubscriptionKeeper.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const PRICE = 50_000n; // 0.05 USDC per 30 days
const INCLUDED = 2;
const UNIT = 2_000n; // 0.002 USDC per unit past the included ones
const UNITS_PER_CALL = 5;

let devnet: Devnet;
let tf: TestFacilitator;
let provider: DevnetAccount;
let apiKey: string;
let planId: bigint;
const sellers: {
  url: string;
  gate: PaymentGate & PaymentGateControls;
  server: RunningServer;
  state: { failing: boolean };
}[] = [];

async function post(path: string, body: unknown) {
  return fetch(`${tf.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/**
 * A seller of one capability drawing 5 units per call. `strip` removes the gate's usage headers from
 * its answers: a seller that does not tell the buyer what it charged.
 */
async function startSeller(strip: boolean) {
  let gate: (PaymentGate & PaymentGateControls) | undefined;
  /** While true, the handler fails (500) after the gate let the call through and counted its units. */
  const state = { failing: false };
  const app = new Hono();
  app.use("/api/*", async (c, next) => {
    const result = await gate!(c.req.raw);
    if (result.kind === "respond") return result.response;
    await next();
    for (const [name, value] of result.headers) c.res.headers.set(name, value);
    if (strip) {
      c.res.headers.delete(HeaderName.Units);
      c.res.headers.delete(HeaderName.OverageCharge);
    }
  });
  app.get("/api/analyze", (c) =>
    state.failing
      ? c.json({ error: { code: "Internal", message: "the word counter crashed" } }, 500)
      : c.json({ words: (c.req.query("text") ?? "").split(" ").length }),
  );
  const server = await serveApp(app);
  gate = paymentGate({
    payTo: provider.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    fetch,
    memoSecret: `metered-units-${strip ? "strip" : "honest"}-seller-secret`,
    clock: systemClock,
    publicOrigin: new URL(server.url).origin,
    providerApiKey: apiKey,
    subscriptionEventPollMs: 0,
    usageFlushIntervalMs: 0,
    routes: {
      "GET /api/analyze": { pricing: [{ type: "subscription", plan: planId }], units: UNITS_PER_CALL },
    },
  });
  const seller = { url: server.url, gate, server, state };
  sellers.push(seller);
  return seller;
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  tf = await startTestFacilitator(devnet);
  provider = devnet.accounts[1]!;
  const challenge = ProviderChallengeResponseSchema.parse(
    await (await post("/providers/challenge", { address: provider.address })).json(),
  );
  const registered = await post("/providers", {
    address: provider.address,
    challenge: challenge.challenge,
    signature: await provider.account.signMessage({ message: challenge.challenge }),
  });
  apiKey = ProviderRegisterResponseSchema.parse(await registered.json()).apiKey;
  const wallet = devnet.walletClient(provider);
  await devnet.publicClient.waitForTransactionReceipt({
    hash: await setOperator(wallet, {
      manager: devnet.contracts.subscriptionManager,
      operator: tf.facilitator.context.gas.address,
      allowed: true,
    }),
  });
  const hash = await createPlan(wallet, {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: PRICE,
    interval: BigInt(30 * DAY),
    includedUnits: BigInt(INCLUDED),
    overageUnitPrice: UNIT,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
}, 120_000);

afterAll(async () => {
  for (const seller of sellers) {
    await seller.gate.close();
    await seller.server.close();
  }
  await tf?.stop();
  await devnet?.stop();
});

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

/** Flushes the seller's usage, then waits until the facilitator has settled `expected` on chain. */
async function settle(seller: { gate: PaymentGateControls }, subscriptionId: bigint, expected: bigint) {
  await seller.gate.flushUsage();
  for (let i = 0; i < 300; i++) {
    const response = await fetch(`${tf.url}/usage?subscriptionId=${subscriptionId}`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    const summary = UsageSummarySchema.parse(await response.json());
    if (summary.unsettled.count === 0 && BigInt(summary.settled.amount) === expected) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("usage did not settle");
}

/** An agent with its own wallet, a budget whose approval hook counts its questions, and the tool. */
async function agentFor(name: string, seller: { url: string }, listed = true) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 5_000_000n });
  const asked: ApprovalRequest[] = [];
  const budget = createBudgetLedger({
    store: tf.store,
    clock: systemClock,
    approval: {
      threshold: 10_000n,
      hook: async (request) => {
        asked.push(request);
        return true;
      },
    },
  });
  await budget.setLimits(name, { total: 1_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url, fetch });
  const keeper = createSubscriptionKeeper({ agent: name, payer, budget, chain: devnet.publicClient });
  const listing = listingOf(
    { seller: { payTo: provider.address }, network: devnet.network, token: devnet.contracts.usd },
    [
      {
        type: "metered",
        planId: planId.toString(),
        amount: PRICE.toString(),
        interval: 30 * DAY,
        includedUnits: INCLUDED,
        overageUnitPrice: UNIT.toString(),
        unitsPerCall: UNITS_PER_CALL,
      },
    ],
    "manifest",
  );
  const tool: StructuredToolInterface = paidTool(
    {
      name: "analyze",
      description: "Counts the words of a text.",
      method: "GET",
      url: `${seller.url}/api/analyze`,
      input: z.object({ text: z.string() }),
    },
    {
      agent: name,
      payer,
      budget,
      subscriptions: keeper,
      listing: listed ? listing : undefined,
      forecast: () => ({ calls: 10, horizonSeconds: 30 * DAY }),
    },
  );
  let n = 0;
  const call = async () => {
    const message = (await tool.invoke({
      type: "tool_call",
      id: `${name}-${++n}`,
      name: "analyze",
      args: { text: "the harbour reopened on monday" },
    })) as ToolMessage;
    return message.artifact as PaidToolReceipt;
  };
  return { account, payer, budget, keeper, asked, call };
}

describe("metered calls of several units", () => {
  it("records what the gate says each call was charged, and equals the chain once the usage settles", async () => {
    const seller = await startSeller(false);
    const agent = await agentFor("units-honest", seller);
    const before = await balanceOf(agent.account.address);
    // 5 units a call, 2 included: 3, then 5, then 5 units past them.
    const receipts = [await agent.call(), await agent.call(), await agent.call()];
    expect(receipts.map((r) => r.error)).toEqual([undefined, undefined, undefined]);
    expect(receipts.map((r) => r.amount)).toEqual(["0.056", "0.01", "0.01"]);
    const overage = 13n * UNIT;
    let report = await agent.budget.report("units-honest");
    expect(report.perKind.metered.spent).toBe(overage);

    const id = BigInt(receipts[0]!.subscriptionId!);
    await settle(seller, id, overage);
    const [synced] = await agent.keeper.sync();
    const loss = before - (await balanceOf(agent.account.address));
    expect(loss).toBe(PRICE + overage);
    // The watcher found on chain exactly what the tool had recorded: nothing new, nothing twice.
    expect(synced).toMatchObject({ subscriptionId: id, pulled: loss, recorded: 0n, beyondHold: 0n });
    report = await agent.budget.report("units-honest");
    expect(report.spent.total).toBe(loss);
    // One approval question for the whole commitment, stating it in full: first period and hold.
    expect(agent.asked).toHaveLength(1);
    expect(agent.asked[0]).toMatchObject({ kind: "subscription", hold: agent.asked[0]!.amount - PRICE });
    expect(agent.asked[0]!.amount).toBe(PRICE + report.subscriptions.held + overage);
  }, 180_000);

  it("learns the units from the gate when nothing lists them (a tool built by hand counts 1 a call)", async () => {
    const seller = sellers[0]!;
    const agent = await agentFor("units-unlisted", seller, false);
    const before = await balanceOf(agent.account.address);
    const receipts = [await agent.call(), await agent.call()];
    expect(receipts.map((r) => r.amount)).toEqual(["0.056", "0.01"]);
    const id = BigInt(receipts[0]!.subscriptionId!);
    await settle(seller, id, 8n * UNIT);
    const [synced] = await agent.keeper.sync();
    const loss = before - (await balanceOf(agent.account.address));
    expect(synced).toMatchObject({ pulled: loss, recorded: 0n });
    expect((await agent.budget.report("units-unlisted")).spent.total).toBe(loss);
  }, 180_000);

  it("tells only the subscriber what its request was charged", async () => {
    const seller = sellers[0]!;
    const agent = await agentFor("units-headers", seller);
    const first = await agent.call();
    const id = BigInt(first.subscriptionId!);
    const url = `${seller.url}/api/analyze?text=hi`;
    const origin = new URL(seller.url).origin;
    const own = await fetch(url, { headers: await agent.payer.subscriptionHeaders(id, origin) });
    expect(own.status).toBe(200);
    expect(own.headers.get(HeaderName.Units)).toBe("5");
    expect(own.headers.get(HeaderName.OverageCharge)).toBe((5n * UNIT).toString());
    // A stranger naming the subscription, or no one: refused, and told nothing of its use.
    const stranger = createPayer({
      account: privateKeyToAccount(generatePrivateKey()),
      network: devnet.network,
      facilitator: tf.url,
      fetch,
    });
    for (const headers of [await stranger.subscriptionHeaders(id, origin), {}]) {
      const response = await fetch(url, { headers });
      expect(response.status).toBe(402);
      expect(response.headers.get(HeaderName.Units)).toBeNull();
      expect(response.headers.get(HeaderName.OverageCharge)).toBeNull();
    }
  }, 180_000);

  it("records the listed units per call when the seller sends no usage headers", async () => {
    const seller = await startSeller(true);
    const agent = await agentFor("units-silent", seller);
    const before = await balanceOf(agent.account.address);
    const receipts = [await agent.call(), await agent.call()];
    expect(receipts.map((r) => r.amount)).toEqual(["0.056", "0.01"]);
    const id = BigInt(receipts[0]!.subscriptionId!);
    await settle(seller, id, 8n * UNIT);
    const [synced] = await agent.keeper.sync();
    const loss = before - (await balanceOf(agent.account.address));
    expect(synced).toMatchObject({ pulled: loss, recorded: 0n });
    expect((await agent.budget.report("units-silent")).spent.total).toBe(loss);
  }, 180_000);

  it("records a metered call answered 5xx at once from the gate's statement, and the watcher adds nothing twice", async () => {
    const seller = await startSeller(false);
    const agent = await agentFor("units-failed", seller);
    const before = await balanceOf(agent.account.address);
    const first = await agent.call();
    expect(first).toMatchObject({ amount: "0.056" });
    seller.state.failing = true;
    const failed = await agent.call();
    seller.state.failing = false;
    // The gate counted the 5 units and said so: the failed call is a paid error, in the ledger now.
    expect(failed).toMatchObject({
      mode: "metered",
      amount: "0.01",
      paid: true,
      error: { code: "Internal" },
    });
    const recorded = 8n * UNIT;
    expect((await agent.budget.report("units-failed")).perKind.metered.spent).toBe(recorded);
    const id = BigInt(first.subscriptionId!);
    await settle(seller, id, recorded);
    const [synced] = await agent.keeper.sync();
    const loss = before - (await balanceOf(agent.account.address));
    expect(loss).toBe(PRICE + recorded);
    expect(synced).toMatchObject({ subscriptionId: id, pulled: loss, recorded: 0n, beyondHold: 0n });
    expect((await agent.budget.report("units-failed")).spent.total).toBe(loss);
  }, 180_000);
});
