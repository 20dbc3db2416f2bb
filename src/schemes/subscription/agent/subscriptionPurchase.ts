/**
 * The `subscription` scheme's part in a paid tool's purchase (src/agent/paidTool/purchasePart.ts):
 * the policy's subscribe choice, taken out through the agent's subscription keeper
 * (keptSubscriptionsPayer.ts: stored claim, budget hold, exact approval), and the calls sent under a
 * held plan — their metered overage charged to the budget as they happen (meteredCharge.ts, with the
 * tool's `UsageMeter` as the floor).
 *
 * A subscription decided for a sale's purchase is the spender's own, across its sales: its period is
 * reserved in the budget (through the keeper), not held against the sale's allowance; when the budget
 * refuses it before anything was paid, the call pays once instead.
 *
 * Overage cap: a metered subscription is taken out with a cap on overage per period. When the gate
 * answers `AllowanceExhausted`, the cap is the agent's own limit, not the budget's: the part raises it
 * (relayed, through the payer) by as much as the budget still has room for, and the call is retried.
 */
import type {
  CallPurchase,
  PurchaseCall,
  PurchaseChoice,
  PurchasePart,
  PurchaseTool,
} from "../../../agent/paidTool/purchasePart.ts";
import type { PolicyDecision } from "../../../agent/policy/decide.ts";
import type { ChooseContext, SubscriptionUse } from "../../../client/fetchOptions.ts";
import { isTollgateError } from "../../../protocol/errors.ts";
import { planTermsOf } from "../../../protocol/paymentRequired.ts";
import { createSubscriptionKeeper, type SubscriptionKeeper } from "./createSubscriptionKeeper.ts";
import { keptSubscriptionsPayer, type SubscribeTerms } from "./keptSubscriptionsPayer.ts";
import { createMeteredCalls, type MeteredCalls } from "./meteredCalls.ts";

declare module "../../../agent/paidTool/purchasePart.ts" {
  interface PaidToolSchemeOptions {
    /**
     * The agent's stored subscriptions (src/schemes/subscription/agent): subscribing, holds and
     * approvals within the budget, metered charges. Default: a keeper over the budget's store (share
     * one per agent).
     */
    subscriptions?: SubscriptionKeeper | undefined;
  }
}

/** Retries of a call after its subscription's overage cap was raised. */
const CAP_RAISE_RETRIES = 3;
/** A little over the gate's minimum age for re-reading a refused subscription. */
const CAP_RAISE_RETRY_MS = 1_100;

/** What every call of one tool shares: the keeper, and the cap raises in flight. */
type SubscriptionTool = {
  tool: PurchaseTool;
  keeper: SubscriptionKeeper;
  raiseOverageCap(): Promise<boolean>;
};

export const subscriptionPurchase: PurchasePart = {
  callsKey: (offer) =>
    offer.subscription === undefined
      ? undefined
      : { planId: offer.subscription.planId, seconds: offer.subscription.interval },
  tool: (tool) => {
    const shared = subscriptionTool(tool);
    return (call) => subscriptionCall(shared, call);
  },
};

function subscriptionTool(tool: PurchaseTool): SubscriptionTool {
  const { agent, payer, budget, origin, meter } = tool;
  const { options } = tool;
  const keeper =
    options.subscriptions ??
    createSubscriptionKeeper({ agent, payer, budget, logger: tool.logger, wait: options.wait });
  /** Cap raises in flight, by subscription: calls refused together share one raise. */
  const raising = new Map<string, Promise<boolean>>();
  /**
   * Raises the overage cap of the subscription held at this origin by what the budget has room for
   * (at most `max(includedUnits, 10)` units' worth at a time), counting the cap not yet used as spent.
   * Resolves false when there is nothing to raise or no room: the refusal then stands.
   */
  const raiseOverageCap = async (): Promise<boolean> => {
    const plan = meter.planAt(origin);
    const held = payer.subscriptions?.forOrigin(origin);
    if (plan === undefined || held === undefined || plan.overageUnitPrice === 0n) return false;
    const key = held.subscriptionId.toString();
    const inFlight = raising.get(key);
    if (inFlight !== undefined) return inFlight;
    const raise = (async () => {
      // Held in the budget first; false when it has no room for one more unit (see the keeper).
      const raised = await keeper.raiseCap(held.subscriptionId, plan);
      if (raised === undefined) return false;
      tool.logger?.info(
        { tool: tool.name, subscriptionId: key, maxOverage: raised.maxOverage.toString() },
        "paid tool raised its overage cap",
      );
      return true;
    })().finally(() => raising.delete(key));
    raising.set(key, raise);
    return raise;
  };
  return { tool, keeper, raiseOverageCap };
}

/** The part of one call: taking out a subscription, and the calls sent under a held one. */
function subscriptionCall(shared: SubscriptionTool, call: PurchaseCall): CallPurchase {
  const { tool, keeper } = shared;
  const metered = createMeteredCalls(tool, keeper, call);
  const taking = createTaking(tool, call);
  return {
    payer: (payer) => keptSubscriptionsPayer(payer, keeper, () => taking.terms),
    fetchOptions: () => ({ onSubscribe: (use) => subscribed(tool, call, metered, use) }),
    revise: (decision, view, context) => taking.revise(decision, view.oneTimeOption !== undefined, context),
    hold: (choice) => taking.hold(choice),
    beforeSend: () => metered.holdAllowance(),
    holdsAccess: () => metered.used,
    async retry(error, attempt) {
      if (await taking.payOnceInstead(error)) return true;
      // Refused for the cap the agent set itself: raise it within the budget and try again. The
      // refusal charged nothing, so a retry cannot pay twice.
      if (!isTollgateError(error, "AllowanceExhausted") || attempt >= CAP_RAISE_RETRIES) return false;
      if (attempt === 0 && !(await shared.raiseOverageCap())) return false;
      // The gate may still hold the old cap for a moment: later retries give it time to re-read.
      if (attempt > 0) await tool.wait(CAP_RAISE_RETRY_MS);
      return true;
    },
    counted() {
      const { offer } = call;
      if (call.decision?.mode === "one-time" && offer?.subscription !== undefined) {
        tool.calls?.record(
          { agent: tool.agent, provider: offer.provider, planId: offer.subscription.planId },
          offer.subscription.interval,
        );
      }
    },
    failed: (response) => metered.failed(response),
    served: (response, mode) => metered.served(response, mode),
  };
}

/** `fetchWithPayment` used or took out a subscription for the call: meter it, and count a first period. */
function subscribed(
  tool: PurchaseTool,
  call: PurchaseCall,
  metered: MeteredCalls,
  use: SubscriptionUse,
): void {
  metered.used = true;
  call.subscriptionId = use.subscriptionId.toString();
  const terms = planTermsOf(use.option);
  if (terms !== undefined) {
    tool.meter.remember(tool.origin, {
      planId: terms.planId,
      provider: use.option.payTo,
      amount: BigInt(terms.amount),
      interval: terms.interval,
      includedUnits: terms.includedUnits,
      overageUnitPrice: BigInt(terms.overageUnitPrice),
    });
  }
  if (use.created) {
    // The keeper committed the first period itself: it is paid, but no reservation of ours holds it.
    call.spend.paid += BigInt(use.option.amount);
    call.spend.selfRecorded += BigInt(use.option.amount);
  }
}

/** Taking out a subscription in one call: the terms asked of the keeper, and paying once instead. */
function createTaking(tool: PurchaseTool, call: PurchaseCall) {
  /** The budget refused a subscription for a sale before anything was paid: pay this call once instead. */
  let payOnce = false;
  const taking = {
    terms: { desiredCap: 0n } as SubscribeTerms,
    revise(decision: PolicyDecision, canPayOnce: boolean, context: ChooseContext): PolicyDecision {
      if (payOnce && decision.mode === "subscribe" && canPayOnce) {
        const reason = `${decision.reason}; paying once: the budget refused the subscription`;
        return { ...decision, mode: "one-time", reason };
      }
      if (context.refusal !== undefined && decision.mode === "subscribe") {
        // Held already, and refused: subscribing again would not help. Pay once instead.
        const reason = `${context.refusal.error}: ${context.refusal.message}; paying once instead`;
        return { ...decision, mode: "one-time", reason };
      }
      return decision;
    },
    async hold({ option, view, seller }: PurchaseChoice): Promise<void> {
      const plan = view.offer.subscription;
      if (call.spend.allowance !== undefined && plan !== undefined) {
        // Subscribing is decided across the spender's sales (its budget, calls and policy), and its
        // period is its own spend: the sale's allowance holds only what the call costs past it (overage).
        call.spend.ownAcrossSales = true;
      } else {
        call.spend.takeAllowance(BigInt(option.amount));
      }
      if (plan === undefined) {
        const ref = `plan:?@${seller}`;
        await call.spend.hold({ amount: BigInt(option.amount), provider: seller, kind: "subscription", ref });
        return;
      }
      // Overage cap: room for the forecast's calls past the included units (twice over), at least
      // as many again as are included, and never more than the budget has left.
      const expected = tool.forecast?.()?.calls ?? plan.includedUnits * 2;
      const over = BigInt(Math.max(plan.includedUnits, 2 * Math.max(0, expected - plan.includedUnits), 10));
      // The keeper grants the smallest of this and what every limit leaves, holds it with the next
      // renewal, approves exactly that, and records the first period (subscriptionCommitment.ts).
      taking.terms = { desiredCap: (plan.overageUnitPrice ?? 0n) * over, provider: seller };
    },
    /** A subscription for a sale that the budget refused before paying: pay this call once instead. */
    async payOnceInstead(error: unknown): Promise<boolean> {
      if (
        !call.spend.ownAcrossSales ||
        payOnce ||
        call.spend.paid !== 0n ||
        !(isTollgateError(error, "BudgetExceeded") || isTollgateError(error, "ApprovalDenied"))
      ) {
        return false;
      }
      payOnce = true;
      call.spend.ownAcrossSales = false;
      await call.spend.settleReservations();
      return true;
    },
  };
  return taking;
}
