/**
 * The calls a paid tool sends under a held metered plan (docs/budgets.md, "How a paid tool spends"):
 * what one may cost is held against a sale's allowance before it is sent, and what it cost is charged
 * to the budget once answered — what the gate states, but never less than the listing's units per
 * call give on the tool's own count (meteredCharge.ts), since the seller is not trusted with the
 * ledger. Past the included units the gate deducts the overage on chain; the budget records it now,
 * from the subscription's hold. The watcher charges the hold's running total from the chain
 * (`charge({ total })`): only what the chain pulled beyond what is recorded is new.
 */
import type { PurchaseCall, PurchaseTool } from "../../../agent/paidTool/purchasePart.ts";
import { heldPlanOffer, type MeteredPlan } from "../../../agent/paidTool/usageMeter.ts";
import type { PolicyOffer } from "../../../agent/policy/policyOffer.ts";
import type { SpendMode } from "../../../agent/spendReport.ts";
import type { SubscriptionKeeper } from "./createSubscriptionKeeper.ts";
import { listedUnitsPerCall, meteredCharge, readStatedCharge } from "./meteredCharge.ts";

export type MeteredCalls = {
  /** The call is sent under a held subscription (set when `fetchWithPayment` uses or takes one). */
  used: boolean;
  /** Holds one call's overage (its listed units) against the sale's allowance, for a held metered plan. */
  holdAllowance(): void;
  /** The seller answered with an error: a call the gate let through is charged anyway. */
  failed(response: Response): Promise<void>;
  /** The seller served the call reported as `mode`: its charge, and the mode and held plan to report. */
  served(response: Response, mode: SpendMode): Promise<{ mode: SpendMode; offer?: PolicyOffer | undefined }>;
};

export function createMeteredCalls(
  tool: PurchaseTool,
  keeper: SubscriptionKeeper,
  call: PurchaseCall,
): MeteredCalls {
  const { meter, origin, payer, listing } = tool;
  const charge = async (plan: MeteredPlan, stated: ReturnType<typeof readStatedCharge>): Promise<bigint> => {
    const { charge: overage } = meteredCharge(stated, listedUnitsPerCall(listing, plan.planId), (units) =>
      meter.count(plan, tool.clock.now(), units),
    );
    if (overage === 0n) return 0n;
    const heldId = payer.subscriptions?.forOrigin(origin)?.subscriptionId;
    if (heldId === undefined || !(await keeper.chargeUsage(heldId, overage))) {
      const r = await call.spend.reserve({ amount: overage, provider: plan.provider, kind: "metered" });
      await tool.budget.commit(r, overage);
    }
    return overage;
  };
  const calls: MeteredCalls = {
    used: meter.planAt(origin) !== undefined && payer.subscriptions?.forOrigin(origin) !== undefined,
    holdAllowance() {
      const heldPlan = calls.used ? meter.planAt(origin) : undefined;
      const { allowance } = call.spend;
      if (allowance !== undefined && heldPlan !== undefined && heldPlan.overageUnitPrice > 0n) {
        call.spend.takeAllowance(
          heldPlan.overageUnitPrice * BigInt(listedUnitsPerCall(listing, heldPlan.planId)),
        );
      }
    },
    async failed(response) {
      // A metered call the gate let through is charged whatever the handler answered (the usage
      // ledger has no undo, docs/gate.md): when the gate states the charge, it is recorded now, not
      // at the watcher's next sync (which then finds it recorded: the hold's running total).
      const plan = calls.used && !call.paidOnce ? meter.planAt(origin) : undefined;
      const stated = plan === undefined ? undefined : readStatedCharge(response.headers, plan);
      if (plan === undefined || stated === undefined) return;
      call.provider ??= plan.provider;
      const overage = await charge(plan, stated);
      if (overage > 0n) {
        call.spend.paid += overage;
        call.failureMode = "metered";
      }
    },
    async served(response, mode) {
      const plan = calls.used && mode !== "one-time" ? meter.planAt(origin) : undefined;
      if (plan === undefined) return { mode };
      call.provider ??= plan.provider;
      let served: SpendMode = mode === "free" ? "subscription" : mode;
      const overage = await charge(plan, readStatedCharge(response.headers, plan));
      if (overage > 0n) {
        call.spend.paid += overage;
        served = "metered";
      }
      return { mode: served, offer: heldPlanOffer(plan) };
    },
  };
  return calls;
}
