/** SubscriptionManager.Status, in declaration order (the numbers `getSubscription` returns). */
export const SubscriptionStatus = {
  None: 0,
  Active: 1,
  Paused: 2,
  Cancelled: 3,
  PastDue: 4,
} as const;
export type SubscriptionStatus = (typeof SubscriptionStatus)[keyof typeof SubscriptionStatus];

const names = ["None", "Active", "Paused", "Cancelled", "PastDue"] as const;
export type SubscriptionStatusName = (typeof names)[number];

/** 1 → "Active"; throws on a number the contract does not produce. */
export function subscriptionStatusName(status: number): SubscriptionStatusName {
  const name = names[status];
  if (name === undefined) throw new Error(`unknown subscription status ${status}`);
  return name;
}

/** Why a deductAllowanceMany item failed (DeductionFailed.reason), as the contract's FAILURE_* constants. */
export const DeductionFailure = {
  NotActive: 1,
  AllowanceExhausted: 2,
  TransferFailed: 3,
  /** The provider deducted under this ref before: the earlier AllowanceDeducted is the deduction. */
  RefUsed: 4,
  /** The deduction would take the subscription past the spend limit its subscriber signed. */
  SpendLimit: 5,
} as const;
