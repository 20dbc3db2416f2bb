/**
 * An agent's subscriptions against a real devnet: every movement of its money is in its ledger and
 * inside its limits (the first period, renewals, overage deductions, the token approval), and its
 * subscriptions are state in its store, not memory.
 *
 * The drain scenario of the review comes last: it moves the chain three months ahead.
 */
import type { ToolMessage } from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { type Address, keccak256, toHex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MarketplaceSeller } from "../agents/marketplace.ts";
import type { BudgetLimitsInput } from "../src/agent/budget/budgetLimits.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { collect } from "../src/chain/actions/subscriptions/collect.ts";
import { deductAllowance } from "../src/chain/actions/subscriptions/deductAllowance.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { parseUnitsExact as usd } from "../src/protocol/amount.ts";
import { systemClock } from "../src/protocol/clock.ts";
import {
  createSubscriptionKeeper,
  type SubscriptionAlert,
} from "../src/schemes/subscription/agent/createSubscriptionKeeper.ts";
import { getSubscriberInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import {
  type AgentStack,
  managerAllowanceOf,
  sellerNamed,
  startAgentStack,
  usdBalanceOf,
} from "./support/agentStack.ts";

const TEXT = "The harbour reopened on Monday. Traders said the catch was excellent and prices fell.";
let stack: AgentStack;
let sentiment: MarketplaceSeller;

beforeAll(async () => {
  stack = await startAgentStack();
  sentiment = sellerNamed(stack, "sentiment");
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

const balanceOf = (owner: Address) => usdBalanceOf(stack, owner);
const allowanceOf = (owner: Address) => managerAllowanceOf(stack, owner);

/** One agent process: its own payer, ledger object and keeper over the shared store. */
async function agentProcess(name: string, key: `0x${string}`, alerts: SubscriptionAlert[] = []) {
  const account = privateKeyToAccount(key);
  const payer = createPayer({ account, network: stack.devnet.network, facilitator: stack.tf.url });
  const budget = createBudgetLedger({ store: stack.tf.store, clock: systemClock });
  const keeper = createSubscriptionKeeper({
    agent: name,
    payer,
    budget,
    chain: stack.devnet.publicClient,
    onAlert: (alert) => alerts.push(alert),
  });
  const tools = await discoverTools({
    market: stack.market.url,
    agent: name,
    payer,
    budget,
    subscriptions: keeper,
  });
  const tool = tools.find((t) => t.tool.name === "sentiment")?.tool as StructuredToolInterface;
  let n = 0;
  const call = async () => {
    const message = (await tool.invoke({
      type: "tool_call",
      id: `${name}-${++n}`,
      name: "sentiment",
      args: { text: TEXT },
    })) as ToolMessage;
    return { content: String(message.content), receipt: message.artifact as PaidToolReceipt };
  };
  return { account, payer, budget, keeper, call };
}

async function newWallet(limits: BudgetLimitsInput, name: string) {
  const key = generatePrivateKey();
  await stack.devnet.fund(privateKeyToAccount(key).address, { usd: usd("20") });
  await createBudgetLedger({ store: stack.tf.store, clock: systemClock }).setLimits(name, limits);
  return key;
}

const subscriptionsOnChain = async (payerAddress: Address, planId: string) =>
  (
    await getSubscriberInfo(
      createPayer({
        account: privateKeyToAccount(generatePrivateKey()),
        network: stack.devnet.network,
        facilitator: stack.tf.url,
      }).facilitator,
      payerAddress,
    )
  ).subscriptions.filter((s) => s.planId === planId);

describe("subscriptions are state, not memory", () => {
  it("a second process of the same agent reuses the subscription the first took out", async () => {
    const key = await newWallet({ total: usd("1") }, "reuser");
    const first = await agentProcess("reuser", key);
    const a = await first.call();
    expect(a.receipt).toMatchObject({ mode: "subscription", amount: "0.05" });
    // A restart: a new payer (empty in-memory book), ledger and keeper over the same store.
    const second = await agentProcess("reuser", key);
    const b = await second.call();
    expect(b.receipt.error).toBeUndefined();
    expect(b.receipt.subscriptionId).toBe(a.receipt.subscriptionId);
    expect(b.receipt.amount).toBe("0");
    const plan = sentiment.plans.sentiment!.planId;
    expect(await subscriptionsOnChain(first.account.address, plan)).toHaveLength(1);
    expect((await second.budget.report("reuser")).spent.total).toBe(usd("0.05"));
  }, 120_000);

  it("two processes calling at once for the first time subscribe once", async () => {
    const key = await newWallet({ total: usd("1") }, "racer");
    const [p1, p2] = [await agentProcess("racer", key), await agentProcess("racer", key)];
    const [r1, r2] = await Promise.all([p1.call(), p2.call()]);
    expect(r1.receipt.error).toBeUndefined();
    expect(r2.receipt.error).toBeUndefined();
    expect(r1.receipt.subscriptionId).toBe(r2.receipt.subscriptionId);
    const plan = sentiment.plans.sentiment!.planId;
    expect(await subscriptionsOnChain(p1.account.address, plan)).toHaveLength(1);
    expect((await p1.budget.report("racer")).spent.total).toBe(usd("0.05"));
    expect(await balanceOf(p1.account.address)).toBe(usd("20") - usd("0.05"));
  }, 120_000);

  it("adopts a subscription the wallet already holds on chain (another store, or a crash before recording)", async () => {
    const key = await newWallet({ total: usd("1") }, "adopter");
    const outside = await agentProcess("adopter", key);
    const plan = sentiment.plans.sentiment!.planId;
    const held = await outside.payer.subscribe({
      planId: plan,
      maxOverage: 0n,
      approval: usd("0.05"),
      exactApproval: true,
    });
    const agent = await agentProcess("adopter", key);
    const result = await agent.call();
    expect(result.receipt.error).toBeUndefined();
    expect(result.receipt.subscriptionId).toBe(held.toString());
    expect(await subscriptionsOnChain(agent.account.address, plan)).toHaveLength(1);
  }, 120_000);
});

describe("every movement of the agent's money is in its ledger and inside its limits", () => {
  it("approves the subscription manager for exactly what the budget holds, no more", async () => {
    const key = await newWallet({ total: usd("1") }, "approver");
    const agent = await agentProcess("approver", key);
    const { receipt } = await agent.call();
    expect(receipt).toMatchObject({ mode: "subscription", amount: "0.05" });
    const report = await agent.budget.report("approver");
    // Plan 0.05 a month, cap 10 × 0.002: this period's cap, the next renewal and its cap are held.
    expect(report.subscriptions.held).toBe(usd("0.02") + usd("0.05") + usd("0.02"));
    expect(await allowanceOf(agent.account.address)).toBe(report.subscriptions.held);
    expect(report.spent.total + report.reserved.total).toBe(usd("0.14"));
  }, 120_000);

  it("a second subscription of the wallet keeps the approval held for the first one's renewal", async () => {
    const key = await newWallet({ total: usd("1") }, "two-plans");
    const account = privateKeyToAccount(key);
    const payer = createPayer({ account, network: stack.devnet.network, facilitator: stack.tf.url });
    const budget = createBudgetLedger({ store: stack.tf.store, clock: systemClock });
    const tools = await discoverTools({
      market: stack.market.url,
      agent: "two-plans",
      payer,
      budget,
      forecast: () => ({ calls: 9, horizonSeconds: 30 * 86_400 }),
    });
    for (const name of ["summarize", "sentiment"]) {
      const tool = tools.find((t) => t.tool.name === name)!.tool;
      const message = (await tool.invoke({
        type: "tool_call",
        id: name,
        name,
        args: { text: TEXT },
      })) as ToolMessage;
      expect(message.artifact).toMatchObject({ mode: "subscription", amount: "0.05" });
    }
    // Summarize (flat 0.05) holds its renewal, sentiment its cap, renewal and cap: one approval for both.
    const report = await budget.report("two-plans");
    expect(report.subscriptions.held).toBe(usd("0.05") + usd("0.09"));
    expect(await allowanceOf(account.address)).toBe(report.subscriptions.held);
  }, 120_000);

  it("renews on what was approved, and the watcher records the renewal and tops the approval up to the hold", async () => {
    const key = await newWallet({ total: usd("1") }, "renewer");
    const agent = await agentProcess("renewer", key);
    const before = await balanceOf(agent.account.address);
    const { receipt } = await agent.call();
    const id = BigInt(receipt.subscriptionId!);
    const { devnet } = stack;
    await devnet.advanceTime(31 * 86_400);
    const seller = devnet.walletClient(sentiment.account);
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await collect(seller, { manager: devnet.contracts.subscriptionManager, subscriptionId: id }),
    });
    const [synced] = await agent.keeper.sync();
    const loss = before - (await balanceOf(agent.account.address));
    expect(loss).toBe(usd("0.10"));
    expect(synced).toMatchObject({ subscriptionId: id, pulled: usd("0.10"), recorded: usd("0.05") });
    const report = await agent.budget.report("renewer");
    expect(report.spent.total).toBe(loss);
    // The hold is grown back to the next renewal and its cap, and the approval topped up to it.
    expect(report.subscriptions.held).toBe(usd("0.09"));
    expect(await allowanceOf(agent.account.address)).toBe(report.subscriptions.held);
  }, 120_000);

  it("a subscription whose renewal the budget cannot hold is paused before a second subscription raises the shared approval", async () => {
    const limit = usd("0.10");
    const key = await newWallet(
      { total: usd("1"), perProvider: { [sentiment.account.address]: limit } },
      "shared-approval",
    );
    const alerts: SubscriptionAlert[] = [];
    const agent = await agentProcess("shared-approval", key, alerts);
    const before = await balanceOf(agent.account.address);
    const { receipt } = await agent.call();
    expect(receipt).toMatchObject({ mode: "subscription", amount: "0.05" });
    const id = BigInt(receipt.subscriptionId!);
    // Sentiment's renewal does not fit its seller's limit: one period is held, and the approval left
    // after the first period is its cap only — too little for a renewal.
    expect(await allowanceOf(agent.account.address)).toBeLessThan(usd("0.05"));

    // A second seller's plan in the same token: its permit raises the wallet's one approval by what
    // the budget holds for it, out of which sentiment's seller could have collected a renewal.
    const summarizer = sellerNamed(stack, "summarizer");
    const second = await agent.keeper.ensure({ planId: summarizer.plans.summarize!.planId });
    expect(second.created).toBe(true);
    expect(alerts).toEqual([expect.objectContaining({ subscriptionId: id, action: "paused" })]);
    expect(
      (await subscriptionsOnChain(agent.account.address, sentiment.plans.sentiment!.planId))[0],
    ).toMatchObject({ status: "Paused" });

    const { devnet } = stack;
    await devnet.advanceTime(31 * 86_400);
    const seller = devnet.walletClient(sentiment.account);
    await expect(
      collect(seller, { manager: devnet.contracts.subscriptionManager, subscriptionId: id }).then((hash) =>
        devnet.publicClient.waitForTransactionReceipt({ hash }),
      ),
    ).rejects.toThrow();
    await agent.keeper.sync();
    const report = await agent.budget.report("shared-approval");
    const loss = before - (await balanceOf(agent.account.address));
    expect(loss).toBe(report.spent.total);
    const provider = report.perProvider.find((p) => p.provider === sentiment.account.address)!;
    expect(provider.spent + provider.reserved).toBeLessThanOrEqual(limit);
  }, 180_000);

  it("the review's drain: a seller deducting and collecting three times takes no more than the budget, and the ledger shows every unit", async () => {
    const limit = usd("0.10");
    const key = await newWallet(
      { total: usd("5"), perProvider: { [sentiment.account.address]: limit } },
      "drained",
    );
    const alerts: SubscriptionAlert[] = [];
    const agent = await agentProcess("drained", key, alerts);
    const before = await balanceOf(agent.account.address);
    const { receipt } = await agent.call();
    expect(receipt).toMatchObject({ mode: "subscription", amount: "0.05" });
    const id = BigInt(receipt.subscriptionId!);
    const report0 = await agent.budget.report("drained");
    // Two periods do not fit in 0.10 with overage: one period is held, with the cap the rest allows.
    expect(report0.spent.total + report0.reserved.total).toBeLessThanOrEqual(limit);

    const { devnet } = stack;
    const seller = devnet.walletClient(sentiment.account);
    const manager = devnet.contracts.subscriptionManager;
    const attempt = async (send: () => Promise<`0x${string}`>) => {
      try {
        await devnet.publicClient.waitForTransactionReceipt({ hash: await send() });
      } catch {
        // refused by the chain (cap, status or allowance): nothing moved
      }
    };
    for (let round = 0; round < 3; round++) {
      for (const amount of [usd("5"), usd("0.05"), usd("0.02"), usd("0.002")]) {
        const ref = keccak256(toHex(`drain-${round}-${amount}`));
        await attempt(() => deductAllowance(seller, { manager, subscriptionId: id, amount, ref }));
      }
      await devnet.advanceTime(31 * 86_400);
      await attempt(() => collect(seller, { manager, subscriptionId: id }));
    }

    const synced = await agent.keeper.sync();
    const loss = before - (await balanceOf(agent.account.address));
    const report = await agent.budget.report("drained");
    expect(loss).toBe(report.spent.total);
    expect(loss).toBeLessThanOrEqual(limit);
    expect(report.spent.total + report.reserved.total).toBeLessThanOrEqual(limit);
    const provider = report.perProvider.find((p) => p.provider === sentiment.account.address)!;
    expect(provider.spent + provider.reserved).toBeLessThanOrEqual(limit);
    // The renewal failed once the approval was used up: the agent cancelled it and said so.
    expect(synced).toEqual([
      expect.objectContaining({ subscriptionId: id, pulled: loss, action: "cancelled" }),
    ]);
    expect(alerts.map((a) => a.action)).toEqual(["cancelled"]);
    expect(await allowanceOf(agent.account.address)).toBe(0n);
  }, 180_000);
});
