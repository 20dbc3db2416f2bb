/**
 * Runs every example end to end, each on its own embedded devnet, and checks the outcome it prints.
 */
import { describe, expect, it } from "vitest";
import { main as agentResale } from "./agentResale.ts";
import { main as budgets } from "./budgets.ts";
import { main as meteredAllowance } from "./meteredAllowance.ts";
import { main as oneTimePayment } from "./oneTimePayment.ts";
import { main as payX402Server } from "./payX402Server.ts";
import { main as subscription } from "./subscription.ts";

const quiet = { print: () => undefined };
const EXAMPLE_TIMEOUT = 120_000;

describe("examples", () => {
  it(
    "oneTimePayment: a 402 without paying, 200 through Hono and Express, balances moved by the price",
    async () => {
      const result = await oneTimePayment(quiet);
      expect(result.unpaidStatus).toBe(402);
      expect(result.honoStatus).toBe(200);
      expect(result.expressStatus).toBe(200);
      expect(result.report).toMatchObject({ id: "42" });
      expect(result.buyerPaid).toBe(2n * result.price);
      expect(result.providerReceived).toBe(2n * result.price);
    },
    EXAMPLE_TIMEOUT,
  );

  it(
    "subscription: subscribes gaslessly on the first 402, is served without paying, refused while paused, served once resumed",
    async () => {
      const result = await subscription(quiet);
      expect(result.statuses.slice(0, 2)).toEqual([402, 200]);
      expect(result.subscribedStatuses).toEqual([200, 200, 200]);
      expect(result.pausedError).toBe("SubscriptionNotActive");
      expect(result.resumedStatus).toBe(200);
      // One period, charged on subscribe; nothing per request.
      expect(result.subscriberPaid).toBe(result.planPrice);
      expect(result.providerReceived).toBe(result.planPrice);
    },
    EXAMPLE_TIMEOUT,
  );

  it(
    "meteredAllowance: included units free, overage up to the cap, AllowanceExhausted, more after raising the cap, settled exactly",
    async () => {
      const result = await meteredAllowance(quiet);
      expect(result.beforeRaise).toEqual([200, 200, 200, 200, 200, 200, 200, 200, "AllowanceExhausted"]);
      expect(result.afterRaise).toEqual([200, 200, 200, "AllowanceExhausted"]);
      // 3 included, 5 under the first cap (0.05), 3 more under the raised one (0.08).
      const expected = result.planPrice + 8n * result.unitPrice;
      expect(result.subscriberPaid).toBe(expected);
      expect(result.providerReceived).toBe(expected);
    },
    EXAMPLE_TIMEOUT,
  );

  it(
    "budgets: refuses spends past the per-provider, total and per-call limits and those the approval hook denies, as tool text",
    async () => {
      const result = await budgets(quiet);
      const outcomes = result.calls.map((c) => [c.agent, c.tool, c.outcome, c.limit]);
      expect(outcomes).toEqual([
        ["researcher", "summarize", "paid", undefined],
        ["researcher", "summarize", "paid", undefined],
        ["researcher", "summarize", "BudgetExceeded", "perProvider"],
        ["researcher", "detect-language", "paid", undefined],
        ["researcher", "detect-language", "paid", undefined],
        ["researcher", "detect-language", "BudgetExceeded", "total"],
        ["intern", "summarize", "BudgetExceeded", "perCall"],
        ["intern", "detect-language", "paid", undefined],
        ["supervised", "summarize", "ApprovalDenied", undefined],
        ["supervised", "detect-language", "paid", undefined],
      ]);
      expect(result.approvalRequests).toEqual([{ agent: "supervised", amount: 20_000n }]);
      // Refused spends moved nothing: each wallet paid exactly what its ledger recorded.
      expect(result.spent).toEqual({
        researcher: { ledger: 50_000n, onChain: 50_000n },
        intern: { ledger: 5_000n, onChain: 5_000n },
        supervised: { ledger: 5_000n, onChain: 5_000n },
      });
    },
    EXAMPLE_TIMEOUT,
  );

  it(
    "payX402Server: Tollgate's payer pays a standard @x402/express server through PAYMENT-SIGNATURE",
    async () => {
      const result = await payX402Server(quiet);
      expect(result.unpaidStatus).toBe(402);
      expect(result.hasPaymentRequiredHeader).toBe(true);
      expect(result.paidStatus).toBe(200);
      expect(result.body).toEqual({ forecast: "sunny" });
      expect(result.settlement.success).toBe(true);
      expect(result.settlement.transaction).toMatch(/^0x[0-9a-f]{64}$/);
      expect(result.buyerPaid).toBe(result.price);
      expect(result.sellerReceived).toBe(result.price);
    },
    EXAMPLE_TIMEOUT,
  );

  it(
    "agentResale: the reseller buys from its suppliers while an agent buys from it, and the balances add up",
    async () => {
      const result = await agentResale(quiet);
      expect(result.briefs).toHaveLength(2);
      for (const brief of result.briefs) expect(JSON.parse(brief)).toHaveProperty("mood");
      const { agent, reseller, summarizer, sentiment } = result.deltas;
      expect(agent).toBe(-2n * 80_000n);
      // Both suppliers were bought from, for what the reseller's ledger recorded.
      expect(new Set(result.resellerPurchases.map((p) => p.tool))).toEqual(
        new Set(["summarize", "sentiment"]),
      );
      expect(result.resellerPurchases.reduce((sum, p) => sum + p.amount, 0n)).toBe(result.resellerSpent);
      expect(summarizer > 0n && sentiment > 0n).toBe(true);
      expect(summarizer + sentiment).toBe(result.resellerSpent);
      expect(reseller).toBe(-agent - result.resellerSpent);
      expect(agent + reseller + summarizer + sentiment).toBe(0n);
    },
    EXAMPLE_TIMEOUT,
  );
});
