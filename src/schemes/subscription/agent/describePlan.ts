/** A plan's pricing in words, for the model that chooses tools (the subscription and metered parts). */
import { usdcText } from "../../../agent/agentScheme.ts";

/** `2592000` → `"30 days"`; intervals that are not whole days or hours are given in seconds. */
export function describeInterval(seconds: number): string {
  const plural = (n: number, unit: string) => `${n} ${unit}${n === 1 ? "" : "s"}`;
  if (seconds % 86_400 === 0) return plural(seconds / 86_400, "day");
  if (seconds % 3_600 === 0) return plural(seconds / 3_600, "hour");
  return plural(seconds, "second");
}

/** A listed plan's terms, as manifests carry them. */
export type ListedPlan = { amount: string; interval: number; overageUnitPrice: string };

/** `"1 USDC every 30 days"`: a plan's period price. */
export function describePeriod(plan: ListedPlan): string {
  return `${usdcText(plan.amount)} every ${describeInterval(plan.interval)}`;
}

/** `", then 0.001 USDC per unit"` when the plan prices overage, else `""`. */
export function describeOverage(plan: ListedPlan): string {
  return BigInt(plan.overageUnitPrice) > 0n ? `, then ${usdcText(plan.overageUnitPrice)} per unit` : "";
}
