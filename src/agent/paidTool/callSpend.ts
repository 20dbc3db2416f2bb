/**
 * The money of one paid call (the budget invariant of src/agent/paidTool.ts): the reservations it
 * holds until the seller's answer shows what moved, what it paid and what it left pending, and what
 * it held against the call allowance of the sale it serves (src/agent/callAllowance.ts).
 *
 * Invariant: every reservation in `reservations` is committed (up to what was paid) or released by
 * `settleReservations`; one a scheme handed to the ledger as pending is taken out first (`untrack`).
 */
import { isTollgateError } from "../../protocol/errors.ts";
import type { BudgetLedger, Reservation, ReserveRequest } from "../budget/createBudgetLedger.ts";
import { type CallAllowance, callAllowanceExceeded } from "../callAllowance.ts";
import type { PurchaseSpend } from "./purchasePart.ts";

/** What a purchase for a sale weighs a one-time price against (`decide`'s `sale` inputs). */
export type SaleWeight = { sale: bigint; saleForProvider?: boolean };

export class CallSpend implements PurchaseSpend {
  /** Reservations this call still has to commit or release. */
  readonly reservations: Reservation[] = [];
  /** The reservation made for each option chosen, by memo: a payment whose answer is lost keeps it. */
  private readonly byMemo = new Map<string, Reservation>();
  /** Paid for the call so far. */
  paid = 0n;
  /** Held for payments whose outcome is unknown (pending in the ledger): spent as far as a sale knows. */
  pending = 0n;
  /** Part of `paid` a scheme recorded in the ledger itself (a first subscription period): no reservation of the call holds it. */
  selfRecorded = 0n;
  /** `selfRecorded` is the spender's own across its sales (a subscription taken for a sale's purchase), not the sale's. */
  ownAcrossSales = false;
  private allowanceHeld = 0n;
  private allowanceSettled = false;

  constructor(
    private readonly budget: BudgetLedger,
    private readonly agent: string,
    private readonly tool: string,
    /** The allowance of the sale this call serves (a reseller's purchase), if any. */
    readonly allowance: CallAllowance | undefined,
  ) {}

  /** Holds `amount` against the sale's call allowance, when the call serves one; throws when it has no room. */
  takeAllowance(amount: bigint): void {
    if (this.allowance === undefined) return;
    if (!this.allowance.take(amount)) throw callAllowanceExceeded(this.tool, this.allowance, amount);
    this.allowanceHeld += amount;
  }

  /**
   * Reserves in the budget. Purchases for an admitted sale reserve within its sale reservation
   * (src/agent/saleAdmission.ts): the part set aside for their supplier first, else (none, or too
   * little left) the sale's slack.
   */
  async reserve(request: ReserveRequest & { provider: string }): Promise<Reservation> {
    const funding = this.allowance?.funding;
    if (funding === undefined) return this.budget.reserve(this.agent, request);
    const part = this.supplierPart(request.provider);
    if (part !== undefined) {
      try {
        return await this.budget.reserve(this.agent, { ...request, within: part });
      } catch (error) {
        if (!isTollgateError(error, "BudgetExceeded") || error.details?.limit !== "sale") throw error;
      }
    }
    return this.budget.reserve(this.agent, { ...request, within: funding.id });
  }

  /**
   * Reserves, and keeps the reservation to settle with what the call paid; with `memo`, a payment of
   * that option whose answer is lost keeps it (`heldFor`).
   */
  async hold(request: ReserveRequest & { provider: string }, memo?: string): Promise<Reservation> {
    const reservation = await this.reserve(request);
    this.reservations.push(reservation);
    if (memo !== undefined) this.byMemo.set(memo, reservation);
    return reservation;
  }

  /** The reservation held for the option with `memo`, if this call made one. */
  heldFor(memo: string): Reservation | undefined {
    return this.byMemo.get(memo);
  }

  /** A reservation the ledger now holds as pending: no longer this call's to commit or release. */
  untrack(reservation: Reservation): void {
    const at = this.reservations.indexOf(reservation);
    if (at >= 0) this.reservations.splice(at, 1);
  }

  /**
   * A purchase for an admitted sale is paid from the sale's reservation, which the report counts as
   * reserved: the policy weighs a one-time payment against what the sale still holds — the supplier's
   * own part when it covers the price (its per-provider limit was met at admission), else the sale's
   * slack (the per-provider limit weighs it). Undefined for a call that serves no sale.
   */
  async saleWeight(seller: string, oneTimePrice: bigint): Promise<SaleWeight | undefined> {
    const funding = this.allowance?.funding;
    if (funding === undefined) return undefined;
    const part = this.supplierPart(seller);
    const partHeld = part === undefined ? 0n : await this.budget.saleHeld(this.agent, part);
    return part !== undefined && partHeld >= oneTimePrice
      ? { sale: partHeld, saleForProvider: true }
      : { sale: await this.budget.saleHeld(this.agent, funding.id) };
  }

  /** Commits what was paid (less what a scheme recorded itself) across the reservations, and releases the rest. */
  async settleReservations(): Promise<void> {
    let left = this.paid - this.selfRecorded;
    for (const r of this.reservations) {
      if (left > 0n) {
        // The smaller of what is left to commit and what this reservation holds (bigints: no Math.min).
        let take = r.amount;
        if (left < take) take = left;
        await this.budget.commit(r, take);
        left -= take;
      } else {
        await this.budget.release(r);
      }
    }
    this.reservations.length = 0;
  }

  /** Settles the sale's allowance once with what moved (pending counts as spent). */
  settleAllowance(): void {
    if (this.allowance === undefined || this.allowanceSettled) return;
    this.allowanceSettled = true;
    // A subscription's first period taken across sales is the spender's own, not this sale's.
    const own = this.ownAcrossSales ? this.selfRecorded : 0n;
    this.allowance.settle(this.allowanceHeld, this.paid + this.pending - own);
  }

  private supplierPart(seller: string): string | undefined {
    return this.allowance?.funding?.bySupplier?.[seller.toLowerCase()];
  }
}
