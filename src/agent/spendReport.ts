/**
 * The spend report of an agent run (docs/budgets.md): per tool, the mode chosen and why, calls, amount,
 * and the cheapest choice in hindsight, from the events paid tools emit.
 */
import { formatUnitsExact } from "../protocol/amount.ts";
import type { PolicyOffer } from "./policy/policyOffer.ts";

export type SpendMode = "one-time" | "subscription" | "metered" | "channel" | "free";

/** What a paid tool tells the report about one call. */
export type SpendEvent = {
  tool: string;
  provider: string;
  mode: SpendMode;
  /** What this call cost the agent, smallest units (0 for a call covered by a subscription). */
  amount: bigint;
  /** The policy's reason, when a payment decision was made on this call. */
  reason?: string | undefined;
  /** The offer the gate made, for the hindsight comparison. */
  offer?: PolicyOffer | undefined;
  transaction?: string | undefined;
  subscriptionId?: string | undefined;
  ok: boolean;
  error?: string | undefined;
};

export type ToolSpend = {
  tool: string;
  provider: string;
  calls: number;
  failed: number;
  amount: bigint;
  modes: Partial<Record<SpendMode, number>>;
  reasons: string[];
  offer: PolicyOffer | undefined;
  transactions: string[];
  /** What the same successful calls would have cost with each choice, known after the fact. */
  hindsight: {
    oneTime: bigint | undefined;
    subscription: bigint | undefined;
    cheapest: "one-time" | "subscription" | undefined;
  };
};

export type SpendReport = {
  tools: ToolSpend[];
  total: bigint;
};

export type SpendCollector = {
  record(event: SpendEvent): void;
  report(): SpendReport;
};

export function createSpendCollector(): SpendCollector {
  const byTool = new Map<string, ToolSpend>();
  return {
    record(event) {
      let entry = byTool.get(event.tool);
      if (entry === undefined) {
        entry = {
          tool: event.tool,
          provider: event.provider,
          calls: 0,
          failed: 0,
          amount: 0n,
          modes: {},
          reasons: [],
          offer: undefined,
          transactions: [],
          hindsight: { oneTime: undefined, subscription: undefined, cheapest: undefined },
        };
        byTool.set(event.tool, entry);
      }
      if (event.ok) entry.calls++;
      else entry.failed++;
      entry.amount += event.amount;
      entry.modes[event.mode] = (entry.modes[event.mode] ?? 0) + 1;
      if (event.reason !== undefined && !entry.reasons.includes(event.reason))
        entry.reasons.push(event.reason);
      if (event.offer !== undefined) {
        // Calls made under a subscription meet no 402 and know only the plan: keep what earlier 402s said.
        entry.offer = {
          provider: event.offer.provider,
          ...((event.offer.oneTime ?? entry.offer?.oneTime) === undefined
            ? {}
            : { oneTime: event.offer.oneTime ?? entry.offer?.oneTime }),
          ...((event.offer.subscription ?? entry.offer?.subscription) === undefined
            ? {}
            : { subscription: event.offer.subscription ?? entry.offer?.subscription }),
        } as PolicyOffer;
      }
      if (event.transaction !== undefined && !entry.transactions.includes(event.transaction)) {
        entry.transactions.push(event.transaction);
      }
    },
    report() {
      const tools = [...byTool.values()].map((t) => ({ ...t, hindsight: hindsightOf(t) }));
      return { tools, total: tools.reduce((sum, t) => sum + t.amount, 0n) };
    },
  };
}

/**
 * The cost of the run's successful calls under each choice, as if the agent had known the count in
 * advance (within one plan period: a demo or a task run is shorter than a plan's interval).
 */
function hindsightOf(t: ToolSpend): ToolSpend["hindsight"] {
  const offer = t.offer;
  if (offer === undefined || t.calls === 0)
    return { oneTime: undefined, subscription: undefined, cheapest: undefined };
  const oneTime = offer.oneTime === undefined ? undefined : offer.oneTime.amount * BigInt(t.calls);
  let subscription: bigint | undefined;
  if (offer.subscription !== undefined) {
    const plan = offer.subscription;
    const over = Math.max(0, t.calls - (plan.includedUnits ?? 0));
    subscription = plan.amount + BigInt(over) * (plan.overageUnitPrice ?? 0n);
  }
  const cheapest =
    oneTime === undefined
      ? subscription === undefined
        ? undefined
        : "subscription"
      : subscription === undefined || oneTime <= subscription
        ? "one-time"
        : "subscription";
  return { oneTime, subscription, cheapest };
}

/** The report as a plain-text table for terminals and logs. */
export function formatSpendReport(report: SpendReport): string {
  const usdc = (v: bigint | undefined) => (v === undefined ? "-" : formatUnitsExact(v));
  const rows = report.tools.map((t) => {
    const modes = Object.entries(t.modes)
      .map(([mode, n]) => `${mode}×${n}`)
      .join(" ");
    const hindsight =
      t.hindsight.cheapest === undefined
        ? "-"
        : `${t.hindsight.cheapest} (one-time ${usdc(t.hindsight.oneTime)}, subscription ${usdc(t.hindsight.subscription)})`;
    return [t.tool, modes, String(t.calls), String(t.failed), usdc(t.amount), hindsight];
  });
  // Failed calls have their own column: a tool whose every call was refused reads "calls 0, failed
  // 1, spent 0", not as a row of zeros that looks like nothing happened.
  const header = ["tool", "modes", "calls", "failed", "spent (USDC)", "cheapest in hindsight"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ");
  const reasons = report.tools.flatMap((t) => t.reasons.map((r) => `  ${t.tool}: ${r}`));
  return [
    line(header),
    line(widths.map((w) => "-".repeat(w))),
    ...rows.map(line),
    `total spent: ${usdc(report.total)} USDC`,
    ...(reasons.length === 0 ? [] : ["why:", ...reasons]),
  ].join("\n");
}
