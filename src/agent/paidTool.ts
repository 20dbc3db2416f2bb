/**
 * `paidTool` (DESIGN.md §7): a gated HTTP capability as a LangChain tool. On a 402 it asks the policy
 * whether to pay once or subscribe, reserves the spend in the agent's budget, pays through the payer,
 * retries, and returns the result as content with the receipt as artifact. Failures come back as text
 * carrying the error code (`BudgetExceeded`, `InsufficientFunds`, `AllowanceExhausted`, …) so a model
 * can act on them instead of the run crashing.
 *
 * Budget invariant: a spend is reserved before anything is signed; it is committed once money moved
 * (even if the request then failed) and released when nothing was paid. A receipt's `amount` is what
 * the call paid, on success and on failure alike: a seller that fails after being paid yields an error
 * receipt with the amount paid (`paid: true`), never one that hides the money.
 *
 * Offer invariant: before the policy weighs a 402, it is held to what the seller listed (offerCheck.ts):
 * a higher price, other plan terms, another payTo, network or token is `OfferMismatch`, with nothing
 * reserved or signed; spends are keyed by the seller's listed identity. A call made for a sale (a
 * reseller's purchase) is held against that sale's call allowance before the budget (callAllowance.ts),
 * and a proof a failing seller gave back is redeemed by the next call to the same target
 * (redeemableProofs.ts).
 *
 * Overage cap: a metered subscription is taken out with a cap on overage per period. When the gate
 * answers `AllowanceExhausted`, the cap is the agent's own limit, not the budget's: the tool raises it
 * (relayed, through the payer) by as much as the budget still has room for, and retries the call.
 */
import { type StructuredToolInterface, type ToolRunnableConfig, tool } from "@langchain/core/tools";
import type { Logger } from "pino";
import type { z } from "zod";
import type { Payer } from "../client/createPayer.ts";
import type { FetchFn } from "../client/facilitatorClient.ts";
import {
  type ChooseContext,
  type FetchWithPaymentOptions,
  fetchWithPayment,
} from "../client/fetchWithPayment.ts";
import { createX402Payment } from "../client/payX402.ts";
import { formatUnitsExact } from "../protocol/amount.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../protocol/errors.ts";
import { HeaderName } from "../protocol/header.ts";
import { type PaymentOption, planTermsOf } from "../protocol/paymentRequired.ts";
import type { BudgetLedger, Reservation } from "./budget/createBudgetLedger.ts";
import { callAllowanceExceeded, callAllowanceOf } from "./callAllowance.ts";
import { listedUnitsPerCall, meteredCharge, readStatedCharge } from "./meteredCharge.ts";
import {
  checkPaymentRequired,
  checkPinnedPayee,
  checkX402PaymentRequired,
  createStoredPayeePins,
  type OfferListing,
  type PayeePins,
} from "./offerCheck.ts";
import type { CallCounter } from "./policy/createCallCounter.ts";
import type { DemandHistory } from "./policy/createDemandHistory.ts";
import { decide, type PolicyDecision, type PolicyForecast } from "./policy/decide.ts";
import { offerFromPaymentRequired } from "./policy/offerFromPaymentRequired.ts";
import type { PolicyOffer } from "./policy/policyOffer.ts";
import { recordDemand } from "./policy/recordDemandOf.ts";
import { learnedForecast } from "./policy/runningForecast.ts";
import { createRedeemableProofs, type RedeemableProof } from "./redeemableProofs.ts";
import { reachSeller } from "./sellerUnreachable.ts";
import type { SpendEvent, SpendMode } from "./spendReport.ts";
import {
  createSubscriptionKeeper,
  type SubscriptionKeeper,
} from "./subscriptions/createSubscriptionKeeper.ts";
import { keptSubscriptionsPayer, type SubscribeTerms } from "./subscriptions/keptSubscriptionsPayer.ts";
import { paidToolMetadata, withPricing } from "./tools/describePricing.ts";

/** A remote capability: where it is served and how it is called. */
export type RemoteCapability = {
  name: string;
  description: string;
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** Absolute URL of the capability. */
  url: string;
  /** JSON Schema of the input object (as in a manifest) or a zod object schema. */
  input: Record<string, unknown> | z.ZodObject;
};

export type PaidToolOptions = {
  /** The agent whose budget pays. */
  agent: string;
  payer: Payer;
  budget: BudgetLedger;
  fetch?: FetchFn | undefined;
  /** Most one payment may cost (USDC text or smallest units); default: the agent's per-call limit, else 1 USDC. */
  maxPrice?: bigint | string | undefined;
  /** Expected calls of this tool (from the planner); without it the policy uses the break-even rule. */
  forecast?: (() => PolicyForecast | undefined) | undefined;
  /**
   * What the seller listed for this capability (its market catalog entry or manifest): every 402 is
   * held to it (price, plan terms, payTo, network, token) and spends are keyed by its `seller`
   * (docs/budgets.md, "Offers are checked against listings"). Without one, the first payee an origin
   * names is pinned in `payees`.
   */
  listing?: OfferListing | undefined;
  /**
   * Payees pinned per origin for tools without a listing. Default: pinned in the agent's store
   * (`createStoredPayeePins`), so later runs are held to the same payee; `createPayeePins()` for memory.
   */
  payees?: PayeePins | undefined;
  /** Calls already paid once, per provider and plan (shared across an agent's tools). */
  calls?: CallCounter | undefined;
  /**
   * The agent's learned demand (docs/policy.md "Learning"): every call is recorded in it, and the
   * policy decides on the running forecast, with `forecast` as its prior. Share it across tools.
   */
  demand?: DemandHistory | undefined;
  onSpend?: ((event: SpendEvent) => void) | undefined;
  logger?: Pick<Logger, "info" | "warn"> | undefined;
  /** Counts subscribed calls per plan and cycle, to charge metered overage to the budget (share it). */
  meter?: UsageMeter | undefined;
  /**
   * Waits before retrying a call after raising an overage cap (a gate re-reads a subscription it
   * refused at most about once a second). Default: a timer.
   */
  wait?: ((ms: number) => Promise<void>) | undefined;
  /**
   * The agent's stored subscriptions (src/agent/subscriptions): subscribing, holds and approvals within
   * the budget, metered charges. Default: a keeper over the budget's store (share one per agent).
   */
  subscriptions?: SubscriptionKeeper | undefined;
  /** Time for the meter's cycles and redeemable proofs' expiry (default: the system clock). */
  clock?: Clock | undefined;
};

/** Retries of a call after its subscription's overage cap was raised. */
const CAP_RAISE_RETRIES = 3;
/** A little over the gate's minimum age for re-reading a refused subscription. */
const CAP_RAISE_RETRY_MS = 1_100;

/** Plan terms of a subscription the agent holds, as the meter needs them. */
type MeteredPlan = {
  planId: string;
  provider: string;
  amount: bigint;
  interval: number;
  includedUnits: number;
  overageUnitPrice: bigint;
};

/**
 * Counts the units of an agent's subscribed calls per plan within the current period, so units past
 * the included ones are charged to the budget at the overage price as they happen (the gate deducts
 * the same amounts on chain). The period is counted from the first call seen; a renewal starts a new
 * count. It is the floor under what a gate states a call cost (meteredCharge.ts).
 */
export type UsageMeter = {
  planAt(origin: string): MeteredPlan | undefined;
  remember(origin: string, plan: MeteredPlan): void;
  /** Counts one call of `units` units (default 1); returns what it costs beyond the included units. */
  count(plan: MeteredPlan, nowMs: number, units?: number): bigint;
};

export function createUsageMeter(): UsageMeter {
  const plans = new Map<string, MeteredPlan>();
  const cycles = new Map<string, { since: number; units: number }>();
  return {
    planAt: (origin) => plans.get(origin),
    remember: (origin, plan) => {
      plans.set(origin, plan);
    },
    count(plan, nowMs, units = 1) {
      const key = `${plan.provider.toLowerCase()}:${plan.planId}`;
      let cycle = cycles.get(key);
      if (cycle === undefined || nowMs - cycle.since >= plan.interval * 1000) {
        cycle = { since: nowMs, units: 0 };
        cycles.set(key, cycle);
      }
      // Units past the included ones, of those this call adds (as the gate counts them).
      const before = Math.max(cycle.units - plan.includedUnits, 0);
      cycle.units += units;
      const after = Math.max(cycle.units - plan.includedUnits, 0);
      return plan.overageUnitPrice * BigInt(after - before);
    },
  };
}

export type PaidToolReceipt = {
  tool: string;
  mode: SpendMode;
  amount: string;
  provider?: string | undefined;
  transaction?: string | undefined;
  subscriptionId?: string | undefined;
  reason?: string | undefined;
  /** Set when the call failed: the code a model can act on. */
  error?: { code: string; message: string } | undefined;
  /**
   * On a failed call: true when money moved for it anyway (the seller failed after being paid), so
   * `amount` was spent; false when the call was refused before anything was paid.
   */
  paid?: boolean | undefined;
};

/** The policy's view of a held plan, for the spend report of calls that met no 402. */
function offerOf(plan: MeteredPlan | undefined): PolicyOffer | undefined {
  if (plan === undefined) return undefined;
  return {
    provider: plan.provider as `0x${string}`,
    subscription: {
      planId: plan.planId,
      amount: plan.amount,
      interval: plan.interval,
      includedUnits: plan.includedUnits,
      overageUnitPrice: plan.overageUnitPrice,
    },
  };
}

const DEFAULT_MAX_PRICE = 1_000_000n;

/**
 * @example
 * const summarize = paidTool(
 *   { name: "summarize", description: "…", method: "POST", url: "http://127.0.0.1:4101/summarize", input: schema },
 *   { agent: "researcher", payer, budget },
 * );
 * const result = await summarize.invoke({ text });
 */
export function paidTool(capability: RemoteCapability, options: PaidToolOptions): StructuredToolInterface {
  const fetch = options.fetch ?? globalThis.fetch;
  const clock = options.clock ?? systemClock;
  const { agent, payer, budget } = options;
  const meter = options.meter ?? createUsageMeter();
  const keeper =
    options.subscriptions ??
    createSubscriptionKeeper({ agent, payer, budget, logger: options.logger, wait: options.wait });
  const origin = new URL(capability.url).origin;
  const { listing } = options;
  // Without a listing, payees are pinned in the agent's store: a later run is held to the same one.
  const payees = options.payees ?? createStoredPayeePins({ store: budget.store, agent });
  /** Proofs paid for and given back by a failing seller: the next call to the same target redeems one. */
  const redeemable = createRedeemableProofs();
  const wait = options.wait ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
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
      options.logger?.info(
        { tool: capability.name, subscriptionId: key, maxOverage: raised.maxOverage.toString() },
        "paid tool raised its overage cap",
      );
      return true;
    })().finally(() => raising.delete(key));
    raising.set(key, raise);
    return raise;
  };

  const run = async (args: unknown, config?: ToolRunnableConfig): Promise<[string, PaidToolReceipt]> => {
    // A reseller's purchase spends within what the sale it serves earned (src/agent/callAllowance.ts):
    // each payment is held against the allowance before the budget, and settled with what moved.
    const allowance = callAllowanceOf(config);
    let allowanceHeld = 0n;
    let allowanceSettled = false;
    const settleAllowance = () => {
      if (allowance === undefined || allowanceSettled) return;
      allowanceSettled = true;
      allowance.settle(allowanceHeld, paidAmount);
    };
    const firstRequest = requestFor(capability, args);
    const target = `${firstRequest.method} ${firstRequest.url}`;
    /** A kept proof this call presents instead of paying (see redeemableProofs.ts). */
    let redeemed: RedeemableProof | undefined;
    const reservations: Reservation[] = [];
    let paidAmount = 0n;
    /** Part of `paidAmount` the subscription keeper recorded itself (a first period). */
    let keeperCharged = 0n;
    let subscribeTerms: SubscribeTerms = { desiredCap: 0n };
    let decision: PolicyDecision | undefined;
    let offer: PolicyOffer | undefined;
    let chosen: PaymentOption | undefined;
    let transaction: string | undefined;
    let provider: string | undefined;
    let subscriptionId: string | undefined;
    let x402Paid = false;

    const choose = async (_options: PaymentOption[], context: ChooseContext) => {
      // Held to the listing before the policy weighs anything: a mismatch throws `OfferMismatch`.
      const checked =
        listing === undefined
          ? context.paymentRequired
          : checkPaymentRequired(context.paymentRequired, listing, capability.name);
      const view = offerFromPaymentRequired(checked, { network: payer.network });
      if (view === undefined) return undefined;
      // The seller's identity keys its spends: the listing's signer, else the payee pinned for the origin.
      const seller =
        listing?.seller ??
        (await checkPinnedPayee(
          checked.accepts.filter((o) => o.network === payer.network).map((o) => o.payTo),
          payees,
          origin,
          capability.name,
        )) ??
        view.offer.provider;
      // The gate refused the subscription this call carried: only paying once can serve it now; with
      // no one-time price the refusal is the answer (and an exhausted cap may be raised, see below).
      if (context.refusal !== undefined && view.oneTimeOption === undefined) return undefined;
      offer = view.offer;
      provider = seller;
      const report = await budget.report(agent);
      const plan = view.offer.subscription;
      const history =
        plan === undefined || options.calls === undefined
          ? undefined
          : options.calls.count({ agent, provider: view.offer.provider, planId: plan.planId }, plan.interval);
      const learned =
        plan === undefined || options.demand === undefined
          ? undefined
          : await learnedForecast(
              options.demand,
              { agent, provider: view.offer.provider, planId: plan.planId },
              { intervalSeconds: plan.interval, prior: options.forecast?.() },
            );
      decision = decide(
        {
          offer: view.offer,
          budget: report,
          ...(history === undefined ? {} : { history }),
          ...(learned !== undefined
            ? { forecast: learned.forecast }
            : options.forecast?.() === undefined
              ? {}
              : { forecast: options.forecast() }),
        },
        { logger: options.logger },
      );
      if (decision.mode === "refuse") {
        throw new TollgateError("BudgetExceeded", decision.reason, { details: { tool: capability.name } });
      }
      if (context.refusal !== undefined && decision.mode === "subscribe") {
        // Held already, and refused: subscribing again would not help. Pay once instead.
        decision = {
          ...decision,
          mode: "one-time",
          reason: `${context.refusal.error}: ${context.refusal.message}; paying once instead`,
        };
      }
      let option = decision.mode === "subscribe" ? view.subscriptionOption : view.oneTimeOption;
      if (option === undefined) return undefined;
      if (allowance !== undefined && !allowance.take(BigInt(option.amount))) {
        // The sale this call serves cannot fund a whole period: pay once if that fits, else refuse.
        const once = view.oneTimeOption;
        if (decision.mode !== "subscribe" || once === undefined || !allowance.take(BigInt(once.amount))) {
          throw callAllowanceExceeded(capability.name, allowance, BigInt(option.amount));
        }
        decision = {
          ...decision,
          mode: "one-time",
          reason: `${decision.reason}; paying once: this call's allowance cannot cover a period`,
        };
        option = once;
      }
      if (allowance !== undefined) allowanceHeld += BigInt(option.amount);
      if (decision.mode === "subscribe" && plan !== undefined) {
        // Overage cap: room for the forecast's calls past the included units (twice over), at least
        // as many again as are included, and never more than the budget has left.
        const expected = options.forecast?.()?.calls ?? plan.includedUnits * 2;
        const over = BigInt(Math.max(plan.includedUnits, 2 * Math.max(0, expected - plan.includedUnits), 10));
        // The keeper grants the smallest of this and what every limit leaves, holds it with the next
        // renewal, approves exactly that, and records the first period (subscriptionCommitment.ts).
        subscribeTerms = { desiredCap: (plan.overageUnitPrice ?? 0n) * over, provider: seller };
        chosen = option;
        return option;
      }
      const kind = decision.mode === "subscribe" ? "subscription" : "one-time";
      reservations.push(
        await budget.reserve(agent, {
          amount: BigInt(option.amount),
          provider: seller,
          kind,
          ...(kind === "subscription" ? { ref: `plan:${plan?.planId ?? "?"}@${seller}` } : {}),
        }),
      );
      chosen = option;
      return option;
    };

    const limits = await budget.getLimits(agent);
    const maxPrice = options.maxPrice ?? limits?.perCall ?? DEFAULT_MAX_PRICE;
    let usedSubscription =
      meter.planAt(origin) !== undefined && payer.subscriptions?.forOrigin(origin) !== undefined;
    const fetchOptions: FetchWithPaymentOptions = {
      maxPrice,
      choose,
      sleep: wait,
      // x402-only servers are paid through the budget too (a custom `choose` disables the default).
      payX402: async (paymentRequired, context) => {
        if (payer.account === undefined) return undefined;
        // Checked before signing: a mismatch throws `OfferMismatch` with nothing signed.
        const checked =
          listing === undefined
            ? paymentRequired
            : checkX402PaymentRequired(paymentRequired, listing, capability.name);
        const pinned =
          listing === undefined
            ? await checkPinnedPayee(
                checked.accepts.filter((o) => o.network === payer.network).map((o) => o.payTo),
                payees,
                origin,
                capability.name,
              )
            : undefined;
        const payment = await createX402Payment(
          { network: payer.network, account: payer.account, facilitator: payer.facilitator },
          checked,
          { maxPrice: context.maxPrice },
        );
        provider = listing?.seller ?? pinned ?? payment.requirements.payTo;
        if (allowance !== undefined) {
          if (!allowance.take(payment.amount)) {
            throw callAllowanceExceeded(capability.name, allowance, payment.amount);
          }
          allowanceHeld += payment.amount;
        }
        reservations.push(
          await budget.reserve(agent, { amount: payment.amount, provider, kind: "one-time" }),
        );
        paidAmount += payment.amount;
        x402Paid = true;
        return payment.header;
      },
      onPayment: (receipt) => {
        paidAmount += BigInt(receipt.option.amount);
        transaction = receipt.settled?.transaction ?? receipt.proof.tx;
      },
      onSubscribe: (use) => {
        usedSubscription = true;
        subscriptionId = use.subscriptionId.toString();
        const terms = planTermsOf(use.option);
        if (terms !== undefined) {
          meter.remember(origin, {
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
          paidAmount += BigInt(use.option.amount);
          keeperCharged += BigInt(use.option.amount);
        }
      },
    };
    // A seller that does not answer is `SellerUnreachable`, not a bare `fetch failed` (Internal).
    const paidFetch = fetchWithPayment(
      reachSeller(fetch),
      keptSubscriptionsPayer(payer, keeper, () => subscribeTerms),
      fetchOptions,
    );
    /** The seller answered an error: its code and message, and what it was paid for the call. */
    const sellerFailure = (status: number, text: string): SellerError => {
      const seller = errorOf(text);
      const code = seller?.code ?? `HTTP${status}`;
      const paidNote =
        paidAmount > 0n
          ? ` after being paid ${formatUnitsExact(paidAmount)} USDC${transaction === undefined ? "" : ` (transaction ${transaction})`}`
          : "";
      return new SellerError(
        code,
        `${capability.name} answered ${status} ${code}${paidNote}${seller?.message === undefined ? "" : `: ${seller.message}`}`,
      );
    };

    try {
      // A held metered plan may charge one call's overage (its listed units): the allowance holds it first.
      const heldPlan = usedSubscription ? meter.planAt(origin) : undefined;
      if (allowance !== undefined && heldPlan !== undefined && heldPlan.overageUnitPrice > 0n) {
        const most = heldPlan.overageUnitPrice * BigInt(listedUnitsPerCall(listing, heldPlan.planId));
        if (!allowance.take(most)) throw callAllowanceExceeded(capability.name, allowance, most);
        allowanceHeld += most;
      }
      let response: Response | undefined;
      for (let attempt = 0; response === undefined; attempt++) {
        try {
          const request = attempt === 0 ? firstRequest : requestFor(capability, args);
          // A proof paid for earlier and given back by this seller goes first: no new payment if it serves.
          redeemed =
            attempt === 0 && usedSubscription === false ? redeemable.take(target, clock.now()) : undefined;
          if (redeemed !== undefined) request.headers.set(HeaderName.Payment, redeemed.header);
          response = await paidFetch(request);
          // Answered 5xx again (and no new payment was made): the seller gave the proof back once more.
          if (redeemed !== undefined && response.status >= 500 && paidAmount === 0n) {
            redeemable.keep(target, redeemed);
          }
        } catch (error) {
          // Refused for the cap the agent set itself: raise it within the budget and try again. The
          // refusal charged nothing, so a retry cannot pay twice.
          if (!isTollgateError(error, "AllowanceExhausted") || attempt >= CAP_RAISE_RETRIES) throw error;
          if (attempt === 0 && !(await raiseOverageCap())) throw error;
          // The gate may still hold the old cap for a moment: later retries give it time to re-read.
          if (attempt > 0) await wait(CAP_RAISE_RETRY_MS);
        }
      }
      await settleReservations(budget, reservations, paidAmount - keeperCharged);
      await recordDemand(options, agent, offer, meter.planAt(origin));
      if (decision?.mode === "one-time" && offer?.subscription !== undefined) {
        options.calls?.record(
          { agent, provider: offer.provider, planId: offer.subscription.planId },
          offer.subscription.interval,
        );
      }
      const text = await response.text();
      if (!response.ok) throw sellerFailure(response.status, text);
      let mode: SpendMode =
        chosen?.scheme === "subscription"
          ? "subscription"
          : chosen !== undefined || x402Paid || redeemed !== undefined
            ? "one-time"
            : "free";
      const metered = usedSubscription && mode !== "one-time" ? meter.planAt(origin) : undefined;
      if (metered !== undefined) {
        provider ??= metered.provider;
        if (mode === "free") mode = "subscription";
        // What the gate says this call was charged, but never less than the listing's units per call
        // give on the tool's own count (meteredCharge.ts): the seller is not trusted with the ledger.
        const { charge: overage } = meteredCharge(
          readStatedCharge(response.headers, metered),
          listedUnitsPerCall(listing, metered.planId),
          (units) => meter.count(metered, clock.now(), units),
        );
        if (overage > 0n) {
          // Past the included units the gate deducts the overage on chain; the budget records it now,
          // from the subscription's hold. The watcher charges the hold's running total from the chain
          // (`charge({ total })`): only what the chain pulled beyond what is recorded is new.
          const heldId = payer.subscriptions?.forOrigin(origin)?.subscriptionId;
          if (heldId === undefined || !(await keeper.chargeUsage(heldId, overage))) {
            const r = await budget.reserve(agent, {
              amount: overage,
              provider: metered.provider,
              kind: "metered",
            });
            await budget.commit(r, overage);
          }
          paidAmount += overage;
          mode = "metered";
        }
      }
      settleAllowance();
      // Served on a proof an earlier call paid for: its spend is in the ledger since that call.
      const redeemedNote =
        redeemed !== undefined && paidAmount === 0n
          ? `redeemed a proof of ${redeemed.amount} USDC paid by an earlier call the seller failed`
          : undefined;
      if (redeemedNote !== undefined) transaction ??= redeemed?.transaction;
      const receipt: PaidToolReceipt = {
        tool: capability.name,
        mode,
        amount: formatUnitsExact(paidAmount),
        provider,
        transaction,
        subscriptionId,
        reason: redeemedNote ?? decision?.reason,
      };
      options.onSpend?.({
        tool: capability.name,
        provider: provider ?? new URL(capability.url).origin,
        mode,
        amount: paidAmount,
        reason: redeemedNote ?? decision?.reason,
        offer: offer ?? offerOf(metered),
        transaction,
        subscriptionId,
        ok: true,
      });
      return [text, receipt];
    } catch (thrown) {
      // The payer re-sent its proof and the seller kept failing: report it as the seller's answer.
      const error =
        isTollgateError(thrown, "PaidRequestFailed") && typeof thrown.details?.status === "number"
          ? sellerFailure(thrown.details.status, String(thrown.details.body ?? ""))
          : thrown;
      await settleReservations(budget, reservations, paidAmount - keeperCharged).catch(() => undefined);
      settleAllowance();
      // The seller gave the proof back (5xx) and it is valid a while yet: the next call redeems it.
      if (
        isTollgateError(thrown, "PaidRequestFailed") &&
        typeof thrown.details?.proof === "string" &&
        typeof thrown.details.redeemableUntil === "number"
      ) {
        redeemable.keep(target, {
          header: thrown.details.proof,
          exp: thrown.details.redeemableUntil,
          amount: formatUnitsExact(BigInt(String(thrown.details.amount ?? "0"))),
          transaction:
            typeof thrown.details.transaction === "string" ? thrown.details.transaction : undefined,
        });
      }
      const code =
        error instanceof SellerError ? error.code : error instanceof TollgateError ? error.code : "Internal";
      const message = error instanceof Error ? error.message : String(error);
      options.onSpend?.({
        tool: capability.name,
        provider: provider ?? new URL(capability.url).origin,
        mode: chosen?.scheme === "subscription" ? "subscription" : "one-time",
        amount: paidAmount,
        reason: decision?.reason,
        offer,
        transaction,
        ok: false,
        error: code,
      });
      options.logger?.warn({ tool: capability.name, code, err: error }, "paid tool call failed");
      const paid = paidAmount > 0n;
      return [
        `ERROR ${code}: ${message}`,
        {
          tool: capability.name,
          mode: !paid ? "free" : chosen?.scheme === "subscription" ? "subscription" : "one-time",
          amount: formatUnitsExact(paidAmount),
          provider,
          transaction,
          subscriptionId,
          reason: decision?.reason,
          error: { code, message },
          paid,
        },
      ];
    }
  };

  return tool(run, {
    name: capability.name,
    // The model reads the listed price with the description; tracing and the orchestrator read metadata.
    description: withPricing(capability.description, listing?.pricing),
    schema: capability.input as Record<string, unknown>,
    responseFormat: "content_and_artifact",
    ...(listing === undefined ? {} : { metadata: paidToolMetadata(listing) }),
  }) as unknown as StructuredToolInterface;
}

/** Commits what was paid across the reservations made for one call, and releases the rest. */
async function settleReservations(
  budget: BudgetLedger,
  reservations: Reservation[],
  paid: bigint,
): Promise<void> {
  let left = paid;
  for (const r of reservations) {
    if (left > 0n) {
      // The smaller of what is left to commit and what this reservation holds (bigints: no Math.min).
      let take = r.amount;
      if (left < take) take = left;
      await budget.commit(r, take);
      left -= take;
    } else {
      await budget.release(r);
    }
  }
  reservations.length = 0;
}

function requestFor(capability: RemoteCapability, args: unknown): Request {
  const input = (args ?? {}) as Record<string, unknown>;
  if (capability.method === "GET" || capability.method === "DELETE") {
    const url = new URL(capability.url);
    for (const [key, value] of Object.entries(input)) {
      if (value !== undefined)
        url.searchParams.set(key, typeof value === "string" ? value : JSON.stringify(value));
    }
    return new Request(url, { method: capability.method });
  }
  return new Request(capability.url, {
    method: capability.method,
    headers: { "content-type": "application/json" },
    body: JSON.stringify(input),
  });
}

/**
 * A seller answered the (paid) request with an error. Its code is the seller's, which need not be
 * one of ours (`HTTP502` when the body names none), so it is not a `TollgateError`.
 */
class SellerError extends Error {
  override readonly name = "SellerError";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The code and message of an error body (a gate's `{error, message}` or `{error: {code, message}}`). */
function errorOf(body: string): { code: string; message: string | undefined } | undefined {
  try {
    const parsed = JSON.parse(body) as { error?: unknown; message?: unknown };
    const text = (value: unknown) => (typeof value === "string" ? value.slice(0, 300) : undefined);
    if (typeof parsed.error === "string" && /^[A-Za-z][A-Za-z0-9]{0,63}$/.test(parsed.error)) {
      return { code: parsed.error, message: text(parsed.message) };
    }
    if (typeof parsed.error === "object" && parsed.error !== null) {
      const { code, message } = parsed.error as { code?: unknown; message?: unknown };
      if (typeof code === "string" && /^[A-Za-z][A-Za-z0-9]{0,63}$/.test(code)) {
        return { code, message: text(message) };
      }
    }
  } catch {
    // not JSON
  }
  return undefined;
}
