/**
 * A subscription the budget holds renews period after period on a real devnet: after each renewal the
 * keeper grows the hold back to the next renewal and its cap and tops the approval up to exactly that
 * (a relayed permit, POST /subscriptions/approval), never above it; the wallet's loss stays equal to
 * the ledger's spend. And the watcher runs the policy's cancel check each look, cancelling through
 * the keeper a subscription the learned demand no longer justifies (docs/budgets.md, "Watching").
 */
import type { ToolMessage } from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MarketplaceSeller } from "../agents/marketplace.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import {
  createCancelClaims,
  type SubscriptionCancelOutcome,
} from "../src/agent/policy/cancelUnneededSubscriptions.ts";
import { createDemandHistory } from "../src/agent/policy/createDemandHistory.ts";
import { collect } from "../src/chain/actions/subscriptions/collect.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { parseUnitsExact as usd } from "../src/protocol/amount.ts";
import { createFixedClock, systemClock } from "../src/protocol/clock.ts";
import {
  createSubscriptionKeeper,
  type SubscriptionAlert,
} from "../src/schemes/subscription/agent/createSubscriptionKeeper.ts";
import { watchSubscriptions } from "../src/schemes/subscription/agent/watchSubscriptions.ts";
import { getSubscriptionInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import {
  type AgentStack,
  managerAllowanceOf,
  sellerNamed,
  startAgentStack,
  usdBalanceOf,
} from "./support/agentStack.ts";

const TEXT = "The harbour reopened on Monday. Traders said the catch was excellent and prices fell.";
const DAY = 86_400;
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

/** An agent with a fresh funded wallet and a budget; its first call subscribes to sentiment's plan. */
async function subscribedAgent(name: string, alerts: SubscriptionAlert[] = []) {
  const key = generatePrivateKey();
  const account = privateKeyToAccount(key);
  await stack.devnet.fund(account.address, { usd: usd("20") });
  const budget = createBudgetLedger({ store: stack.tf.store, clock: systemClock });
  await budget.setLimits(name, { total: usd("1") });
  const payer = createPayer({ account, network: stack.devnet.network, facilitator: stack.tf.url });
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
  const before = await balanceOf(account.address);
  const message = (await tool.invoke({
    type: "tool_call",
    id: `${name}-1`,
    name: "sentiment",
    args: { text: TEXT },
  })) as ToolMessage;
  const receipt = message.artifact as PaidToolReceipt;
  expect(receipt).toMatchObject({ mode: "subscription", amount: "0.05" });
  return { account, payer, budget, keeper, before, subscriptionId: BigInt(receipt.subscriptionId!) };
}

describe("renewals inside the budget", () => {
  it("renews period after period on approvals topped up to exactly the hold", async () => {
    const agent = await subscribedAgent("renews-on");
    const { devnet } = stack;
    const seller = devnet.walletClient(sentiment.account);
    const manager = devnet.contracts.subscriptionManager;
    for (let period = 1; period <= 3; period++) {
      await devnet.advanceTime(31 * DAY);
      await devnet.publicClient.waitForTransactionReceipt({
        hash: await collect(seller, { manager, subscriptionId: agent.subscriptionId }),
      });
      const [synced] = await agent.keeper.sync();
      expect(synced).toMatchObject({ subscriptionId: agent.subscriptionId, action: "none" });
      expect(synced!.pulled).toBe(usd("0.05") * BigInt(period + 1));
      const report = await agent.budget.report("renews-on");
      // This period's cap, the next renewal and its cap are held, and approved: not a unit more.
      expect(report.subscriptions.held).toBe(usd("0.02") + usd("0.05") + usd("0.02"));
      expect(await allowanceOf(agent.account.address)).toBe(report.subscriptions.held);
      const loss = agent.before - (await balanceOf(agent.account.address));
      expect(report.spent.total).toBe(loss);
      const info = await getSubscriptionInfo(agent.payer.facilitator, agent.subscriptionId);
      expect(info.status).toBe("Active");
    }
    // The first period and three renewals, each in the ledger.
    expect(agent.before - (await balanceOf(agent.account.address))).toBe(usd("0.20"));
  }, 180_000);
});

describe("cap raises", () => {
  it("hold the raise, then add it to the approval, so the next renewal's approval stays whole", async () => {
    const agent = await subscribedAgent("raises-cap");
    const before = await allowanceOf(agent.account.address);
    const raised = await agent.keeper.raiseCap(agent.subscriptionId, {
      overageUnitPrice: usd("0.002"),
      includedUnits: 5,
    });
    // Ten units' worth: 0.02 more cap, held and approved.
    expect(raised).toEqual({ maxOverage: usd("0.04") });
    const report = await agent.budget.report("raises-cap");
    expect(report.subscriptions.held).toBe(usd("0.09") + usd("0.02"));
    expect(await allowanceOf(agent.account.address)).toBe(before + usd("0.02"));
    expect(await allowanceOf(agent.account.address)).toBe(report.subscriptions.held);
  }, 120_000);
});

describe("the watcher's cancel check", () => {
  it("cancels, through the keeper, a subscription the learned demand no longer justifies", async () => {
    const alerts: SubscriptionAlert[] = [];
    const agent = await subscribedAgent("rarely-calls", alerts);
    const plan = sentiment.plans.sentiment!;
    // One call seen, sixty days ago: far fewer than the five a month the plan would need to pay off.
    const clock = createFixedClock(Date.UTC(2026, 0, 1));
    const demand = createDemandHistory({ store: stack.tf.store, clock });
    const key = { agent: "rarely-calls", provider: sentiment.account.address, planId: plan.planId };
    await demand.record(key, 30 * DAY, { oneTimePrice: usd("0.01") });
    clock.advance(60 * DAY * 1000);
    // Into the window before the renewal, where the check judges it.
    const info = await getSubscriptionInfo(agent.payer.facilitator, agent.subscriptionId);
    await stack.devnet.advanceTime(Number(info.nextChargeAt) - info.chainTime - 6 * 3600);

    let checked: (outcomes: SubscriptionCancelOutcome[]) => void = () => {};
    const firstCheck = new Promise<SubscriptionCancelOutcome[]>((resolve) => {
      checked = resolve;
    });
    const watcher = watchSubscriptions({
      keeper: agent.keeper,
      policy: {
        agent: "rarely-calls",
        payer: agent.payer,
        demand,
        claims: createCancelClaims({ store: stack.tf.store, clock }),
        clock,
      },
      onCancelCheck: checked,
      wait: (_ms, signal) =>
        new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true })),
    });
    const outcomes = await firstCheck;
    await watcher.stop();
    expect(outcomes).toEqual([
      expect.objectContaining({ subscriptionId: agent.subscriptionId.toString(), outcome: "cancelled" }),
    ]);
    expect((await getSubscriptionInfo(agent.payer.facilitator, agent.subscriptionId)).status).toBe(
      "Cancelled",
    );
    // Cancelled through the keeper: the hold is ended, so the budget no longer counts it.
    expect((await agent.budget.report("rarely-calls")).subscriptions.held).toBe(0n);
    expect(alerts.map((a) => a.action)).toEqual(["cancelled"]);
  }, 180_000);
});
