/**
 * What an agent commits to when it subscribes (docs/budgets.md, "Subscriptions"). On chain a seller
 * can take, from the subscriber's allowance to the SubscriptionManager: the first period (on
 * subscribe), overage up to the cap in every period (`deductAllowance`), and a renewal whenever one is
 * due (`collect`). The agent therefore
 * - holds in its budget everything the subscription can still take: this period's cap, and, when the
 *   budget has room, the next renewal and its cap;
 * - approves the manager for exactly the first period plus that hold, never more (the chain's
 *   `transferFrom` then refuses anything beyond it: a later renewal fails and the subscription goes
 *   PastDue instead of draining the wallet);
 * - sets the cap to the smallest of what every limit leaves.
 *
 * Invariant (checked by subscriptionCommitment.property.test.ts): price + hold ≤ room, and approval =
 * price + hold, where room is `availableFor(report, { provider, kind })` before subscribing.
 */

export type CommitmentInput = {
  /** The plan's price per period. */
  price: bigint;
  /** The cap the caller would like (room for the forecast's overage); 0 for none. */
  desiredCap: bigint;
  /** Price of one overage unit (0 for a flat plan). */
  overageUnitPrice: bigint;
  /** The least room every limit leaves for this provider now; undefined when no limit applies. */
  room: bigint | undefined;
};

export type SubscriptionCommitment = {
  /** The overage cap per period to subscribe with. */
  cap: bigint;
  /** Whether the next renewal is held (and approved) too; otherwise the plan lapses after one period. */
  renews: boolean;
  /** The standing hold: cap, plus price + cap when it renews. */
  hold: bigint;
  /** The token approval to give the manager: the first period plus the hold. */
  approval: bigint;
};

const min = (a: bigint, b: bigint) => (a < b ? a : b);

/**
 * The commitment for one subscription, or undefined when the budget cannot pay its first period.
 * Renews when the room covers two periods with at least one overage unit (or the desired cap, if
 * smaller) in each; the cap is then what is left split over the two periods.
 */
export function subscriptionCommitment(input: CommitmentInput): SubscriptionCommitment | undefined {
  const { price, room } = input;
  const desired = input.desiredCap < 0n ? 0n : input.desiredCap;
  if (room !== undefined && room < price) return undefined;
  if (room === undefined) {
    const hold = desired + price + desired;
    return { cap: desired, renews: true, hold, approval: price + hold };
  }
  const leastCap = min(desired, input.overageUnitPrice);
  if (room >= 2n * price + 2n * leastCap) {
    const cap = min(desired, (room - 2n * price) / 2n);
    const hold = cap + price + cap;
    return { cap, renews: true, hold, approval: price + hold };
  }
  const cap = min(desired, room - price);
  return { cap, renews: false, hold: cap, approval: price + cap };
}
