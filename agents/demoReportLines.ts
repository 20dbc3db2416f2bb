/**
 * Lines of the demo's report that add up on their own: the budget as spent + reserved + left, the
 * policy's forecast notes set against what was bought, and the notary's answer in one whole line.
 */
import type { BudgetReport } from "../src/agent/budget/budgetReport.ts";
import type { SpendReport } from "../src/agent/spendReport.ts";
import { formatUnitsExact } from "../src/protocol/amount.ts";

const usdc = (v: bigint) => `${formatUnitsExact(v)} USDC`;

/**
 * The budget's total split into what was spent, what is reserved (held, not yet spent) and what is
 * left; the three add up to the limit because the ledger's "remaining" is limit − spent − reserved.
 */
export function budgetLines(agent: string, total: bigint, report: BudgetReport): string[] {
  const held = report.subscriptions.held + report.subscriptions.reserved;
  const other = report.reserved.total - held;
  const parts = [
    held > 0n ? [held, "held for the subscriptions' next renewals and overage"] : undefined,
    other > 0n ? [other, "for open channels and calls in flight"] : undefined,
  ].filter((p) => p !== undefined) as [bigint, string][];
  // One part needs no amount of its own: it is the whole of what is reserved.
  const named = parts.map(([amount, what]) => (parts.length > 1 ? `${usdc(amount)} ${what}` : what));
  const left = report.remaining.total ?? 0n;
  return [
    `  budget of "${agent}": ${usdc(total)} = spent + reserved + left`,
    `    spent     ${usdc(report.spent.total)}`,
    `    reserved  ${usdc(report.reserved.total)}${named.length > 0 ? `  (${named.join("; ")})` : ""}`,
    `    left      ${usdc(left)}`,
  ];
}

const COVERS = /covers only (\d+) of the forecast calls/;

/**
 * After each policy reason that says the budget covers only part of a tool's forecast, a line on what
 * was bought: the policy counts the room the budget left when the first call was decided, and later
 * calls may find more (a subscription's hold released, a day rolled over).
 */
export function withForecastNotes(lines: readonly string[], report: SpendReport): string[] {
  return lines.flatMap((line) => {
    const covered = COVERS.exec(line);
    const tool = report.tools.find((t) => line.trimStart().startsWith(`${t.tool}: `));
    if (covered === null || tool === undefined) return [line];
    const count = Number(covered[1]);
    const bought = tool.calls - tool.failed;
    if (bought <= count) return [line];
    const indent = line.slice(0, line.length - line.trimStart().length);
    return [
      line,
      `${indent}  ${bought} were bought (${usdc(tool.amount)}): the ${count} is the room the budget left when the first call was decided; more was free by the later calls.`,
    ];
  });
}

/** The notary's JSON answer as one whole line: what was recorded, where and when. */
export function notarizedLine(content: unknown): string {
  try {
    const out = JSON.parse(String(content)) as Record<string, unknown>;
    const when = typeof out.timestamp === "number" ? new Date(out.timestamp * 1000).toISOString() : "?";
    return `  notarized: hash ${String(out.hash)} in transaction ${String(out.transactionHash)}, block ${String(out.blockNumber)} (${when})`;
  } catch {
    return `  notarized: ${String(content)}`;
  }
}
