/**
 * The agent runtime end to end over real services: a devnet, the facilitator, the market and the demo
 * marketplace's five sellers (agents/marketplace.ts). Agents discover the sellers' paid endpoints,
 * and each purchase is checked three ways — the paid tool's receipt and spend report, the budget
 * ledger, and on-chain USDC balances.
 */
import type { ToolMessage } from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoAccounts, type Marketplace } from "../agents/marketplace.ts";
import type { BudgetLimitsInput } from "../src/agent/budget/budgetLimits.ts";
import { type BudgetApproval, createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import { createSpendCollector } from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import type { Devnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import type { RunningServer } from "../src/facilitator/createFacilitator.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { getSubscriptionInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";
import type { TestFacilitator } from "./support/facilitatorHarness.ts";

const MONTH = 30 * 86_400;
const TEXT =
  "The harbour reopened on Monday after a week of storms. Fishing boats returned before dawn. " +
  "Traders said the catch was excellent and prices fell. The council promised new breakwaters by spring.";

let devnet: Devnet;
let tf: TestFacilitator;
let market: RunningServer;
let marketplace: Marketplace;
let stack: AgentStack | undefined;

beforeAll(async () => {
  stack = await startAgentStack();
  ({ devnet, tf, market, marketplace } = stack);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

const seller = (name: string) => {
  const found = marketplace.sellers.find((s) => s.name === name);
  if (found === undefined) throw new Error(`no seller ${name}`);
  return found;
};

/** A fresh agent: its own funded key, a budget with `limits`, and the market's tools as paid tools. */
async function newAgent(
  name: string,
  limits: BudgetLimitsInput,
  options: { forecast?: Record<string, number>; approval?: BudgetApproval; funds?: bigint } = {},
) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: options.funds ?? 10_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock, approval: options.approval });
  await budget.setLimits(name, limits);
  const spend = createSpendCollector();
  const discovered = await discoverTools({
    market: market.url,
    agent: name,
    payer,
    budget,
    calls: createCallCounter({ clock: systemClock }),
    forecast: (tool) => {
      const calls = options.forecast?.[tool];
      return calls === undefined ? undefined : { calls, horizonSeconds: MONTH };
    },
    onSpend: spend.record,
  });
  const tool = (toolName: string): StructuredToolInterface => {
    const found = discovered.find((d) => d.tool.name === toolName);
    if (found === undefined) throw new Error(`no tool ${toolName}`);
    return found.tool;
  };
  let calls = 0;
  /** Invokes a tool as a model's tool call would, so the receipt comes back as the artifact. */
  const call = async (toolName: string, args: Record<string, unknown>) => {
    calls += 1;
    const message = (await tool(toolName).invoke({
      type: "tool_call",
      id: `${name}-${calls}`,
      name: toolName,
      args,
    })) as ToolMessage;
    return { content: String(message.content), receipt: message.artifact as PaidToolReceipt };
  };
  return { name, account, payer, budget, spend, discovered, call };
}

describe("subscribe or pay once, by forecast", () => {
  it("subscribes with 100 calls ahead and pays once with 2, and the spend equals what the policy reported", async () => {
    const summarizer = seller("summarizer");
    const plan = summarizer.plans.summarize!;
    const heavy = await newAgent("forecast-100", { total: 1_000_000n }, { forecast: { summarize: 100 } });
    const light = await newAgent("forecast-2", { total: 1_000_000n }, { forecast: { summarize: 2 } });
    const sellerBefore = await balanceOf(summarizer.account.address);

    const heavyReceipts: PaidToolReceipt[] = [];
    for (let i = 0; i < 3; i++) {
      const { content, receipt } = await heavy.call("summarize", { text: TEXT, sentences: 1 });
      expect(JSON.parse(content)).toHaveProperty("summary");
      heavyReceipts.push(receipt);
    }
    // The first call subscribes (the policy says why); the next two ride on the subscription.
    expect(heavyReceipts.map((r) => [r.mode, r.amount])).toEqual([
      ["subscription", "0.05"],
      ["subscription", "0"],
      ["subscription", "0"],
    ]);
    expect(heavyReceipts[0]!.subscriptionId).toMatch(/^\d+$/);
    expect(heavyReceipts[0]!.reason).toMatch(/subscribe\.$/);

    const lightReceipts: PaidToolReceipt[] = [];
    for (let i = 0; i < 2; i++) {
      lightReceipts.push((await light.call("summarize", { text: TEXT, sentences: 1 })).receipt);
    }
    expect(lightReceipts.map((r) => [r.mode, r.amount])).toEqual([
      ["one-time", "0.02"],
      ["one-time", "0.02"],
    ]);
    expect(lightReceipts[0]!.reason).toMatch(/pay once\.$/);
    expect(lightReceipts.every((r) => /^0x[0-9a-f]{64}$/.test(r.transaction ?? ""))).toBe(true);

    // Receipts, spend report, ledger and chain agree for each agent.
    for (const [agent, expected] of [
      [heavy, plan.amount],
      [light, 40_000n],
    ] as const) {
      const report = agent.spend.report();
      expect(report.total).toBe(expected);
      expect((await agent.budget.report(agent.name)).spent.total).toBe(expected);
      expect(await balanceOf(agent.account.address)).toBe(10_000_000n - expected);
    }
    const heavyTool = heavy.spend.report().tools[0]!;
    expect(heavyTool.modes).toEqual({ subscription: 3 });
    expect((await heavy.budget.report(heavy.name)).subscriptions.active).toHaveLength(1);
    expect(await balanceOf(summarizer.account.address)).toBe(sellerBefore + plan.amount + 40_000n);
  });
});

describe("budget limits over real payments", () => {
  it("holds a per-provider limit while other providers can still be bought", async () => {
    const summarizer = seller("summarizer").account.address;
    const agent = await newAgent("per-provider", {
      total: 1_000_000n,
      perProvider: { [summarizer]: 30_000n },
    });
    const first = await agent.call("summarize", { text: TEXT });
    expect(first.receipt).toMatchObject({ mode: "one-time", amount: "0.02" });
    const second = await agent.call("summarize", { text: TEXT });
    expect(second.content).toMatch(/^ERROR BudgetExceeded/);
    expect(second.receipt.error?.code).toBe("BudgetExceeded");
    const other = await agent.call("detect-language", { text: TEXT });
    expect(JSON.parse(other.content)).toMatchObject({ language: "en" });
    expect(other.receipt).toMatchObject({ mode: "one-time", amount: "0.005" });

    const report = await agent.budget.report(agent.name);
    expect(report.spent.total).toBe(25_000n);
    const perProvider = report.perProvider.find((p) => p.provider.toLowerCase() === summarizer.toLowerCase());
    expect(perProvider?.spent).toBe(20_000n);
    expect(report.reserved.total).toBe(0n);
    expect(await balanceOf(agent.account.address)).toBe(10_000_000n - 25_000n);
  });

  it("holds a per-call limit: a one-time price above it is refused and nothing is paid", async () => {
    // No room for subscriptions either (a plan's price is bounded by the commitment limit, not per call).
    const agent = await newAgent("per-call", {
      total: 1_000_000n,
      perCall: 10_000n,
      maxSubscriptionCommitment: 0n,
    });
    const refused = await agent.call("summarize", { text: TEXT });
    expect(refused.content).toMatch(/^ERROR BudgetExceeded/);
    expect(refused.receipt.amount).toBe("0");
    expect(await balanceOf(agent.account.address)).toBe(10_000_000n);
    const allowed = await agent.call("detect-language", { text: TEXT });
    expect(allowed.receipt).toMatchObject({ mode: "one-time", amount: "0.005" });
    expect((await agent.budget.report(agent.name)).spent.total).toBe(5_000n);
    expect(await balanceOf(agent.account.address)).toBe(10_000_000n - 5_000n);
  });

  it("takes the subscription when only the per-call limit blocks paying once", async () => {
    const agent = await newAgent("per-call-sub", { total: 1_000_000n, perCall: 10_000n });
    const { receipt } = await agent.call("summarize", { text: TEXT });
    expect(receipt).toMatchObject({ mode: "subscription", amount: "0.05" });
    expect(receipt.reason).toMatch(/subscribe instead\.$/);
    expect((await agent.budget.report(agent.name)).spent.total).toBe(50_000n);
    expect(await balanceOf(agent.account.address)).toBe(10_000_000n - 50_000n);
  });

  it("stops the spend when the approval hook says no: ApprovalDenied text and nothing paid", async () => {
    const asked: bigint[] = [];
    const agent = await newAgent(
      "approval",
      { total: 1_000_000n },
      {
        approval: {
          threshold: 10_000n,
          hook: async (request) => {
            asked.push(request.amount);
            return false;
          },
        },
      },
    );
    const denied = await agent.call("summarize", { text: TEXT });
    expect(denied.content).toMatch(/^ERROR ApprovalDenied/);
    expect(denied.receipt.error?.code).toBe("ApprovalDenied");
    expect(asked).toEqual([20_000n]);
    // Below the threshold the hook is not asked and the purchase goes through.
    const small = await agent.call("detect-language", { text: TEXT });
    expect(small.receipt).toMatchObject({ mode: "one-time", amount: "0.005" });
    expect(asked).toEqual([20_000n]);
    const report = await agent.budget.report(agent.name);
    expect(report.spent.total).toBe(5_000n);
    expect(report.reserved.total).toBe(0n);
    expect(await balanceOf(agent.account.address)).toBe(10_000_000n - 5_000n);
  });
});

/**
 * Sends the sentiment seller's recorded usage to the facilitator and waits until the chain holds
 * `expected` as the subscription's overage this period; returns what it holds at the end.
 */
async function overageOnChain(
  payer: { facilitator: Parameters<typeof getSubscriptionInfo>[0] },
  id: string,
  expected: bigint,
) {
  await seller("sentiment").specialist.flushUsage();
  let used = 0n;
  for (let i = 0; i < 300; i++) {
    used = BigInt((await getSubscriptionInfo(payer.facilitator, id)).overageUsed);
    if (used === expected) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return used;
}

describe("metered subscriptions past the agent's own overage cap", () => {
  // The sentiment plan: 0.05 USDC a month, 5 calls included, then 0.002 a call. Without a forecast a
  // paid tool subscribes with room for 10 calls of overage (0.02 USDC): call 16 meets the cap.
  it("raises the cap within the budget when the gate answers AllowanceExhausted, and keeps buying", async () => {
    const agent = await newAgent("overage-raise", { total: 1_000_000n });
    const receipts: PaidToolReceipt[] = [];
    for (let i = 0; i < 18; i++) {
      const { content, receipt } = await agent.call("sentiment", { text: TEXT });
      expect(receipt.error).toBeUndefined();
      expect(JSON.parse(content)).toMatchObject({ label: "positive" });
      receipts.push(receipt);
    }
    expect(receipts.map((r) => `${r.mode} ${r.amount}`)).toEqual([
      "subscription 0.05",
      ...Array.from({ length: 4 }, () => "subscription 0"),
      ...Array.from({ length: 13 }, () => "metered 0.002"),
    ]);
    const subscription = await getSubscriptionInfo(agent.payer.facilitator, receipts[0]!.subscriptionId!);
    expect(BigInt(subscription.maxOverage)).toBeGreaterThan(20_000n);
    expect((await agent.budget.report(agent.name)).spent.total).toBe(50_000n + 13n * 2_000n);
    expect(agent.spend.report().total).toBe(50_000n + 13n * 2_000n);
    // The gate deducted the same overage on chain (settled in batches by the facilitator).
    expect(await overageOnChain(agent.payer, receipts[0]!.subscriptionId!, 13n * 2_000n)).toBe(13n * 2_000n);
  }, 120_000);

  it("leaves the cap where it is when the budget has no room for another call: AllowanceExhausted text, nothing paid", async () => {
    // Room for the plan and the 10 calls of overage of the first cap, and 0.001 more: less than a call.
    const agent = await newAgent("overage-tight", { total: 50_000n + 20_000n + 1_000n });
    const first = await agent.call("sentiment", { text: TEXT });
    expect(first.receipt).toMatchObject({ mode: "subscription", amount: "0.05" });
    for (let i = 1; i < 15; i++) {
      expect((await agent.call("sentiment", { text: TEXT })).receipt.error).toBeUndefined();
    }
    const refused = await agent.call("sentiment", { text: TEXT });
    expect(refused.content).toMatch(/^ERROR AllowanceExhausted/);
    expect(refused.receipt).toMatchObject({
      amount: "0",
      paid: false,
      error: { code: "AllowanceExhausted" },
    });
    const report = await agent.budget.report(agent.name);
    expect(report.spent.total).toBe(70_000n);
    expect(report.reserved.total).toBe(0n);
    const id = first.receipt.subscriptionId!;
    expect(await overageOnChain(agent.payer, id, 20_000n)).toBe(20_000n);
    expect(BigInt((await getSubscriptionInfo(agent.payer.facilitator, id)).maxOverage)).toBe(20_000n);
  }, 120_000);
});

describe("agent-to-agent resale", () => {
  it("the reseller pays two specialists while being paid, and every account's delta is accounted for", async () => {
    const agent = await newAgent("brief-buyer", { total: 1_000_000n });
    const reseller = seller("reseller").account.address;
    const summarizer = seller("summarizer").account.address;
    const sentiment = seller("sentiment").account.address;
    expect(reseller).toBe(devnet.accounts[demoAccounts.reseller]!.address);
    const accounts = [agent.account.address, reseller, summarizer, sentiment];
    const before = await Promise.all(accounts.map(balanceOf));
    const resoldBefore = marketplace.resellerSpend.length;

    const briefs = [];
    for (let i = 0; i < 2; i++) {
      const { content, receipt } = await agent.call("brief", { text: TEXT });
      expect(receipt).toMatchObject({ mode: "one-time", amount: "0.08" });
      briefs.push(JSON.parse(content) as { summary: string; mood: string; sources: string[] });
    }
    expect(briefs[0]!.sources).toEqual(["summarize", "sentiment"]);
    expect(briefs[0]!.mood).toBe("positive");

    const after = await Promise.all(accounts.map(balanceOf));
    const delta = after.map((value, i) => value - before[i]!);
    const resold = marketplace.resellerSpend.slice(resoldBefore);
    expect(resold.every((e) => e.ok)).toBe(true);
    expect(new Set(resold.map((e) => e.tool))).toEqual(new Set(["summarize", "sentiment"]));
    const paidTo = (tool: string) =>
      resold.filter((e) => e.tool === tool).reduce((sum, e) => sum + e.amount, 0n);
    const resellerPaid = paidTo("summarize") + paidTo("sentiment");
    expect(resellerPaid).toBeGreaterThan(0n);

    expect(delta[0]).toBe(-160_000n); // the agent: two briefs
    expect(delta[1]).toBe(160_000n - resellerPaid); // the reseller: sold two, bought from both
    expect(delta[2]).toBe(paidTo("summarize"));
    expect(delta[3]).toBe(paidTo("sentiment"));
    // USDC only moved between these four accounts.
    expect(delta.reduce((sum, d) => sum + d, 0n)).toBe(0n);
    expect(agent.spend.report().total).toBe(160_000n);
    expect((await agent.budget.report(agent.name)).spent.total).toBe(160_000n);
  });
});
