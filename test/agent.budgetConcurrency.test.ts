/**
 * A budget is never exceeded, also with 50 paid tool calls in flight at once: a fast-check property
 * over budgets and call mixes, against the real devnet, facilitator, market and marketplace sellers.
 * Money is counted three ways — the ledger, the spend events, and the payer's on-chain balance — and
 * what the wallet still lets the SubscriptionManager pull (a subscription's next renewal) is held.
 */
import type { ToolMessage } from "@langchain/core/messages";
import fc from "fast-check";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Marketplace } from "../agents/marketplace.ts";
import type { BudgetLimitsInput } from "../src/agent/budget/budgetLimits.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import { createSpendCollector } from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import type { Devnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import type { RunningServer } from "../src/facilitator/createFacilitator.ts";
import { parseUnitsExact } from "../src/protocol/amount.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, managerAllowanceOf, startAgentStack } from "./support/agentStack.ts";
import type { TestFacilitator } from "./support/facilitatorHarness.ts";

const TEXT =
  "Rail services were delayed across the region this morning. Engineers repaired a signal fault. " +
  "Passengers were angry about the missing updates. Trains ran normally again by noon.";
const FUNDS = 5_000_000n;
/** Tools bought here: one-time only (detect-language), one-time or subscription (summarize), resold (brief). */
const TOOLS = ["detect-language", "summarize", "brief"] as const;

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

const sellerAddress = (name: string) => {
  const found = marketplace.sellers.find((s) => s.name === name);
  if (found === undefined) throw new Error(`no seller ${name}`);
  return found.account.address;
};

let agents = 0;

/** Runs `mix` (tool names) all at once under `limits`; returns what each count of money says. */
async function burst(limits: BudgetLimitsInput, mix: readonly string[]) {
  agents += 1;
  const agent = `burst-${agents}`;
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: FUNDS });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(agent, limits);
  const spend = createSpendCollector();
  const tools = await discoverTools({
    market: market.url,
    agent,
    payer: createPayer({ account, network: devnet.network, facilitator: tf.url }),
    budget,
    calls: createCallCounter({ clock: systemClock }),
    onSpend: spend.record,
  });
  const byName = new Map(tools.map((t) => [t.tool.name, t.tool]));
  const results = await Promise.all(
    mix.map(async (name, i) => {
      const message = (await byName.get(name)!.invoke({
        type: "tool_call",
        id: `${agent}-${i}`,
        name,
        args: { text: TEXT },
      })) as ToolMessage;
      return { content: String(message.content), receipt: message.artifact as PaidToolReceipt };
    }),
  );
  const report = await budget.report(agent);
  return {
    results,
    report,
    events: spend.report(),
    onChain: FUNDS - (await balanceOf(account.address)),
    approval: await managerAllowanceOf(stack!, account.address),
  };
}

type Burst = Awaited<ReturnType<typeof burst>>;

/**
 * After a burst, every call's reservation is settled and only subscriptions hold money: the next
 * renewal (and its cap) of each one still live, which the seller may `collect` when the period ends.
 * That standing hold is exactly what the wallet approved the SubscriptionManager for, so the most the
 * wallet can still lose is in the budget: spent + held ≤ every limit.
 */
function expectOnlyStandingHolds({ report, onChain, approval }: Burst, limits: BudgetLimitsInput) {
  expect(report.reserved.total).toBe(report.subscriptions.held);
  expect(report.subscriptions.pending).toEqual([]);
  const live = new Set(report.subscriptions.active.map((s) => s.ref));
  for (const h of report.subscriptions.holds) expect(live.has(h.ref)).toBe(true);
  expect(approval).toBe(report.subscriptions.held);
  if (limits.total !== undefined) {
    expect(report.spent.total + report.reserved.total).toBeLessThanOrEqual(BigInt(limits.total));
    expect(onChain + approval).toBeLessThanOrEqual(BigInt(limits.total));
  }
}

describe("budgets under 50 concurrent paid calls", () => {
  it("never spends past the total, per-provider or per-call limit, never leaves a buyer with a paid failure; ledger, spend events and chain agree", async () => {
    const summarizer = sellerAddress("summarizer");
    const seen = { paid: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          total: fc.bigInt({ min: 0n, max: 400_000n }),
          summarizerCap: fc.option(fc.bigInt({ min: 0n, max: 200_000n }), { nil: undefined }),
          perCall: fc.option(fc.constantFrom(5_000n, 20_000n, 40_000n), { nil: undefined }),
          maxSubscriptionCommitment: fc.option(fc.constantFrom(0n, 50_000n), { nil: undefined }),
        }),
        fc.array(fc.constantFrom(...TOOLS), { minLength: 50, maxLength: 50 }),
        async (l, mix) => {
          const limits: BudgetLimitsInput = {
            total: l.total,
            ...(l.summarizerCap === undefined ? {} : { perProvider: { [summarizer]: l.summarizerCap } }),
            ...(l.perCall === undefined ? {} : { perCall: l.perCall }),
            ...(l.maxSubscriptionCommitment === undefined
              ? {}
              : { maxSubscriptionCommitment: l.maxSubscriptionCommitment }),
          };
          const outcome = await burst(limits, mix);
          const { results, report, events, onChain } = outcome;

          expect(report.spent.total).toBeLessThanOrEqual(l.total);
          expect(onChain).toBeLessThanOrEqual(l.total);
          // Every payment was recorded: nothing moved on chain that the ledger does not hold; no
          // call's hold outlived it, and a live subscription's next renewal is held and approved alike.
          expect(onChain).toBe(report.spent.total);
          expect(events.total).toBe(report.spent.total);
          expectOnlyStandingHolds(outcome, limits);
          if (l.summarizerCap !== undefined) {
            const tally = report.perProvider.find(
              (p) => p.provider.toLowerCase() === summarizer.toLowerCase(),
            );
            expect((tally?.spent ?? 0n) + (tally?.reserved ?? 0n)).toBeLessThanOrEqual(l.summarizerCap);
          }
          let receipted = 0n;
          for (const { content, receipt } of results) {
            receipted += parseUnitsExact(receipt.amount);
            if (receipt.error === undefined) seen.paid += 1;
            else seen.refused += 1;
            if (receipt.error !== undefined) {
              // A failed call says why, with a code a model can act on, and none was paid: a refusal by
              // the buyer's budget, or by the reseller (its own budget could not reserve the sale's
              // supplier spend, SaleNotAdmitted) before the buyer paid. Never a paid failure.
              expect(content).toMatch(/^ERROR [A-Za-z]+/);
              expect({ code: receipt.error.code, paid: receipt.paid, amount: receipt.amount }).toEqual({
                code:
                  receipt.tool === "brief" && receipt.error.code === "SaleNotAdmitted"
                    ? "SaleNotAdmitted"
                    : "BudgetExceeded",
                paid: false,
                amount: "0",
              });
            } else if (l.perCall !== undefined && receipt.mode === "one-time") {
              expect(parseUnitsExact(receipt.amount)).toBeLessThanOrEqual(l.perCall);
            }
          }
          // The receipts account for every unit paid.
          expect(receipted).toBe(onChain);
          // Paid and refused calls account for all 50.
          expect(results).toHaveLength(50);
        },
      ),
      {
        numRuns: 8,
        endOnFailure: true,
        // Replay a run: FC_SEED=-1573814475 (the seeds -1573814475 and -433545572 found paid failures;
        // 1721331633 a subscription's next renewal held, which expectOnlyStandingHolds now expects).
        ...(process.env.FC_SEED === undefined ? {} : { seed: Number(process.env.FC_SEED) }),
      },
    );
    // The runs bought and were refused: both sides of every limit were exercised.
    expect(seen.paid).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
  }, 300_000);

  it("holds the next renewal of the plan a per-call limit made it subscribe to, and nothing else, once 50 calls are done", async () => {
    // fast-check's counterexample (seed 1721331633, path 4): the one-time summarize (0.02) is above the
    // per-call limit, so the first summarize subscribes (0.05 a month, flat) and the others join it.
    // The budget has room for two periods, so the keeper holds the next renewal and approves exactly it.
    const summarizer = sellerAddress("summarizer");
    const limits = {
      total: 338_118n,
      perProvider: { [summarizer]: 180_812n },
      perCall: 5_000n,
      maxSubscriptionCommitment: 50_000n,
    };
    const mix = Array.from({ length: 50 }, (_, i) => TOOLS[i % 3]!);
    const outcome = await burst(limits, mix);
    const { results, report, onChain, approval } = outcome;
    const summaries = results.filter((r) => r.receipt.tool === "summarize");
    expect(summaries.map((r) => [r.receipt.mode, r.receipt.error?.code]).sort()).toEqual(
      summaries.map(() => ["subscription", undefined]),
    );
    expect(summaries.filter((r) => r.receipt.amount === "0.05")).toHaveLength(1);
    const period = parseUnitsExact("0.05");
    expect(report.subscriptions.active.map((s) => [s.provider, s.amount])).toEqual([[summarizer, period]]);
    expect(report.subscriptions.holds.map((h) => [h.provider, h.held])).toEqual([[summarizer, period]]);
    expect(report.reserved.total).toBe(period);
    expect(approval).toBe(period);
    expect(onChain).toBe(report.spent.total);
    expectOnlyStandingHolds(outcome, limits);
  }, 120_000);

  it("spends a budget that fits exactly 20 of 50 one-time calls on exactly 20", async () => {
    const mix = Array.from({ length: 50 }, () => "detect-language");
    const { results, report, onChain } = await burst({ total: 100_000n }, mix);
    expect(results.filter((r) => r.receipt.error === undefined)).toHaveLength(20);
    expect(results.filter((r) => r.receipt.error?.code === "BudgetExceeded")).toHaveLength(30);
    expect(report.spent.total).toBe(100_000n);
    expect(onChain).toBe(100_000n);
  }, 120_000);
});
