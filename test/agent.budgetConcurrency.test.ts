/**
 * A budget is never exceeded, also with 50 paid tool calls in flight at once: a fast-check property
 * over budgets and call mixes, against the real devnet, facilitator, market and marketplace sellers.
 * Money is counted three ways — the ledger, the spend events, and the payer's on-chain balance.
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
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";
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
  };
}

describe("budgets under 50 concurrent paid calls", () => {
  it("never spends past the total, per-provider or per-call limit; ledger, spend events and chain agree", async () => {
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
          const { results, report, events, onChain } = await burst(limits, mix);

          expect(report.spent.total).toBeLessThanOrEqual(l.total);
          expect(onChain).toBeLessThanOrEqual(l.total);
          // Every payment was recorded: nothing moved on chain that the ledger does not hold, and
          // no hold outlived its call.
          expect(onChain).toBe(report.spent.total);
          expect(events.total).toBe(report.spent.total);
          expect(report.reserved.total).toBe(0n);
          if (l.summarizerCap !== undefined) {
            const spent =
              report.perProvider.find((p) => p.provider.toLowerCase() === summarizer.toLowerCase())?.spent ??
              0n;
            expect(spent).toBeLessThanOrEqual(l.summarizerCap);
          }
          let receipted = 0n;
          for (const { content, receipt } of results) {
            receipted += parseUnitsExact(receipt.amount);
            if (receipt.error === undefined) seen.paid += 1;
            else seen.refused += 1;
            if (receipt.error !== undefined) {
              // A failed call says why, with a code a model can act on. Every failure is a refusal by
              // the buyer's budget before paying, which costs nothing — except the reseller's: it can
              // be paid and then fail, when its own budget (shared by every sale in this file) no
              // longer covers a supplier. Its buyer then holds a paid receipt for the brief's price
              // (and the proof to redeem), which the money counts below include.
              expect(content).toMatch(/^ERROR [A-Za-z]+/);
              const paidThenFailed = receipt.tool === "brief" && receipt.paid === true;
              expect({
                tool: receipt.tool,
                code: receipt.error.code,
                paid: receipt.paid,
                amount: receipt.amount,
              }).toEqual(
                paidThenFailed
                  ? { tool: "brief", code: receipt.error.code, paid: true, amount: "0.08" }
                  : { tool: receipt.tool, code: "BudgetExceeded", paid: false, amount: "0" },
              );
              if (paidThenFailed) expect(content).toContain("the reseller could not buy");
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
      { numRuns: 8, endOnFailure: true },
    );
    // The runs bought and were refused: both sides of every limit were exercised.
    expect(seen.paid).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
  }, 300_000);

  it("spends a budget that fits exactly 20 of 50 one-time calls on exactly 20", async () => {
    const mix = Array.from({ length: 50 }, () => "detect-language");
    const { results, report, onChain } = await burst({ total: 100_000n }, mix);
    expect(results.filter((r) => r.receipt.error === undefined)).toHaveLength(20);
    expect(results.filter((r) => r.receipt.error?.code === "BudgetExceeded")).toHaveLength(30);
    expect(report.spent.total).toBe(100_000n);
    expect(onChain).toBe(100_000n);
  }, 120_000);
});
