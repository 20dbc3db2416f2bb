/**
 * `paidTool` (docs/agents.md): a gated HTTP capability as a LangChain tool. On a 402 it asks the policy
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
import type { Address } from "viem";
import type { z } from "zod";
import type { ReadClient } from "../chain/clientTypes.ts";
import type { Payer } from "../client/createPayer.ts";
import {
  type ChooseContext,
  type FetchWithPaymentOptions,
  fetchWithPayment,
} from "../client/fetchWithPayment.ts";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { formatUnitsExact } from "../protocol/amount.ts";
import { CHANNEL_VOUCHER_HEADER } from "../protocol/channelVoucher.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../protocol/errors.ts";
import { HeaderName, safeDecodeJsonHeader } from "../protocol/header.ts";
import { type PaymentOption, planTermsOf } from "../protocol/paymentRequired.ts";
import { X402SettleResponseSchema } from "../protocol/x402.ts";
import type { AgentChannels } from "../schemes/channel/agent/channelCommitments.ts";
import { channelTermsOf } from "../schemes/channel/channelTerms.ts";
import { withChannelWallet } from "../schemes/channel/client.ts";
import {
  listedUnitsPerCall,
  meteredCharge,
  readStatedCharge,
} from "../schemes/metered/agent/meteredCharge.ts";
import {
  createSubscriptionKeeper,
  type SubscriptionKeeper,
} from "../schemes/subscription/agent/createSubscriptionKeeper.ts";
import {
  keptSubscriptionsPayer,
  type SubscribeTerms,
} from "../schemes/subscription/agent/keptSubscriptionsPayer.ts";
import { createX402Payment, type X402Payment } from "../schemes/x402Exact/client/payX402.ts";
import type { BudgetLedger, Reservation, ReserveRequest } from "./budget/createBudgetLedger.ts";
import { recoverPayment, resolvePendingPayments } from "./budget/pendingPayments.ts";
import { takeStoredProof } from "./budget/storedProofs.ts";
import { callAllowanceExceeded, callAllowanceOf } from "./callAllowance.ts";
import {
  channelCloseDelayRefusal,
  checkPaymentRequired,
  checkPinnedPayee,
  checkX402PaymentRequired,
  createStoredPayeePins,
  type OfferListing,
  type PayeePins,
} from "./offerCheck.ts";
import type { CallCounter } from "./policy/createCallCounter.ts";
import type { DemandHistory } from "./policy/createDemandHistory.ts";
import {
  CHANNEL_HORIZON_SECONDS,
  decide,
  type PolicyDecision,
  type PolicyForecast,
} from "./policy/decide.ts";
import { offerFromPaymentRequired } from "./policy/offerFromPaymentRequired.ts";
import type { PolicyOffer } from "./policy/policyOffer.ts";
import { recordDemand } from "./policy/recordDemandOf.ts";
import { learnedForecast } from "./policy/runningForecast.ts";
import { createRedeemableProofs, REDEEM_MARGIN_SECONDS, type RedeemableProof } from "./redeemableProofs.ts";
import { reachSeller } from "./sellerUnreachable.ts";
import type { SpendEvent, SpendMode } from "./spendReport.ts";
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
   * The agent's stored subscriptions (src/schemes/subscription/agent): subscribing, holds and approvals within
   * the budget, metered charges. Default: a keeper over the budget's store (share one per agent).
   */
  subscriptions?: SubscriptionKeeper | undefined;
  /** Time for the meter's cycles and redeemable proofs' expiry (default: the system clock). */
  clock?: Clock | undefined;
  /**
   * The agent's prepaid channels (`createAgentChannels`, share one per agent): with them the policy may
   * open a channel when many calls will follow, its deposit held in the budget; later calls pay by
   * voucher up front (one HTTP exchange). Without them channel offers are not taken.
   */
  channels?: AgentChannels | undefined;
  /**
   * A node of the payer's chain. An x402 payment that a seller answered with an error, and did not
   * say it settled, is then held pending and read back from the chain (released if its authorization
   * expires unused, docs/budgets.md); without it such a payment counts as spent.
   */
  chain?: ReadClient | undefined;
};

/** Retries of a call after its subscription's overage cap was raised. */
const CAP_RAISE_RETRIES = 3;
/** A little over the gate's minimum age for re-reading a refused subscription. */
const CAP_RAISE_RETRY_MS = 1_100;
/** Lost payments whose target a tool remembers for redemption: a flaky facilitator cannot grow it unbounded. */
const MAX_LOST_TARGETS = 64;

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
   * Payments of this agent whose outcome is unknown (a lost `/authorize` answer) are read back before
   * each call, one resolution at a time (src/agent/budget/pendingPayments.ts). A payment of this tool
   * whose answer was lost in this process was never presented to its seller: once read back as
   * settled, its proof is kept for the next call to the same target, which redeems it instead of
   * paying again — so that call waits for the read-back. Otherwise the read-back runs in the
   * background: a call does not wait for a facilitator that may be down.
   */
  let resolving: Promise<unknown> | undefined;
  /**
   * A proof of a lost-answer payment to `target` that settled later, kept in the agent's store by
   * whichever process read it back (storedProofs.ts); a store that cannot answer redeems nothing.
   */
  const takeKeptProof = async (target: string): Promise<RedeemableProof | undefined> => {
    const kept = await takeStoredProof(budget.store, {
      agent,
      target,
      minExp: Math.floor(clock.now() / 1000) + REDEEM_MARGIN_SECONDS,
    }).catch((error: unknown) => {
      options.logger?.warn({ err: error }, "kept proofs not read");
      return undefined;
    });
    if (kept === undefined) return undefined;
    return {
      header: kept.header,
      exp: kept.exp,
      amount: formatUnitsExact(kept.amount),
      transaction: kept.transaction,
    };
  };
  /** The request target of each payment of this tool whose answer was lost, by authorization nonce. */
  const lostTargets = new Map<string, string>();
  const resolvePending = (): Promise<unknown> => {
    if (typeof payer.payment !== "function") return Promise.resolve();
    resolving ??= resolvePendingPayments({ agent, budget, payer, clock, chain: options.chain })
      .then((resolved) => {
        // A settled one's proof is now in the agent's store (storedProofs.ts), for the next call.
        for (const r of resolved) if (r.outcome !== "pending") lostTargets.delete(r.nonce.toLowerCase());
      })
      .catch((error: unknown) => options.logger?.warn({ err: error }, "pending payments not read back"))
      .finally(() => {
        resolving = undefined;
      });
    return resolving;
  };

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
    const pendingRead = resolvePending();
    if (lostTargets.size > 0) await pendingRead;
    // A reseller's purchase spends within what the sale it serves earned (src/agent/callAllowance.ts):
    // each payment is held against the allowance before the budget, and settled with what moved.
    const allowance = callAllowanceOf(config);
    let allowanceHeld = 0n;
    let allowanceSettled = false;
    const settleAllowance = () => {
      if (allowance === undefined || allowanceSettled) return;
      allowanceSettled = true;
      // A subscription's first period taken across sales is the spender's own, not this sale's.
      allowance.settle(allowanceHeld, paidAmount + pendingAmount - (crossSale ? keeperCharged : 0n));
    };
    /**
     * Purchases for an admitted sale reserve within its sale reservation (src/agent/saleAdmission.ts):
     * the part set aside for their supplier first, else (none, or too little left) the sale's slack.
     */
    const funding = allowance?.funding;
    const partFor = (seller: string) => funding?.bySupplier?.[seller.toLowerCase()];
    const reserveFor = async (request: ReserveRequest & { provider: string }): Promise<Reservation> => {
      if (funding === undefined) return budget.reserve(agent, request);
      const part = partFor(request.provider);
      if (part !== undefined) {
        try {
          return await budget.reserve(agent, { ...request, within: part });
        } catch (error) {
          if (!isTollgateError(error, "BudgetExceeded") || error.details?.limit !== "sale") throw error;
        }
      }
      return budget.reserve(agent, { ...request, within: funding.id });
    };
    /**
     * A subscription decided for a sale's purchase is the spender's own, across its sales: its period is
     * reserved in the budget (through the keeper), not held against the sale's allowance.
     */
    let crossSale = false;
    /** The budget refused such a subscription before anything was paid: pay this call once instead. */
    let payOnce = false;
    const firstRequest = requestFor(capability, args);
    const target = `${firstRequest.method} ${firstRequest.url}`;
    /** A kept proof this call presents instead of paying (see redeemableProofs.ts). */
    let redeemed: RedeemableProof | undefined;
    const reservations: Reservation[] = [];
    /** The reservation made for each `exact` option chosen, by memo: a payment whose answer is lost keeps it. */
    const heldFor = new Map<string, Reservation>();
    /** Held for payments whose outcome is unknown (pending in the ledger): spent as far as a sale knows. */
    let pendingAmount = 0n;
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
    /** The x402 payment this call signed and sent, until the seller's answer shows what became of it. */
    let x402Held: { reservation: Reservation; payment: X402Payment; from: Address } | undefined;

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
      // A channel is taken only by an agent with a channel wallet, and never for a sale's purchase (its
      // deposit would outlive the sale's allowance).
      if (options.channels === undefined || allowance !== undefined) delete view.offer.channel;
      const tooLong =
        view.offer.channel === undefined || view.channelOption === undefined || options.channels === undefined
          ? undefined
          : channelCloseDelayRefusal(view.channelOption, options.channels.maxCloseDelay, capability.name);
      if (tooLong !== undefined) {
        // The seller's close delay is above the agent's bound: pay it another way, or not at all.
        if (view.offer.oneTime === undefined && view.offer.subscription === undefined) throw tooLong;
        delete view.offer.channel;
      }
      if (context.refusal !== undefined) delete view.offer.channel;
      offer = view.offer;
      provider = seller;
      const report = await budget.report(agent);
      // A purchase for an admitted sale is paid from the sale's reservation, which the report counts
      // as reserved: the policy weighs a one-time payment against what the sale still holds.
      // The supplier's own part when it covers the price (its per-provider limit was met at
      // admission), else the sale's slack (the per-provider limit weighs it).
      let sale: { sale: bigint; saleForProvider?: boolean } | undefined;
      if (funding !== undefined) {
        const part = partFor(seller);
        const partHeld = part === undefined ? 0n : await budget.saleHeld(agent, part);
        sale =
          part !== undefined && partHeld >= (view.offer.oneTime?.amount ?? 0n)
            ? { sale: partHeld, saleForProvider: true }
            : { sale: await budget.saleHeld(agent, funding.id) };
      }
      const plan = view.offer.subscription;
      const history =
        options.calls === undefined
          ? undefined
          : plan !== undefined
            ? options.calls.count(
                { agent, provider: view.offer.provider, planId: plan.planId },
                plan.interval,
              )
            : view.offer.channel !== undefined
              ? options.calls.count(
                  { agent, provider: view.offer.provider, planId: "channel" },
                  CHANNEL_HORIZON_SECONDS,
                )
              : undefined;
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
          ...sale,
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
      if (payOnce && decision.mode === "subscribe" && view.oneTimeOption !== undefined) {
        decision = {
          ...decision,
          mode: "one-time",
          reason: `${decision.reason}; paying once: the budget refused the subscription`,
        };
      }
      if (context.refusal !== undefined && decision.mode === "subscribe") {
        // Held already, and refused: subscribing again would not help. Pay once instead.
        decision = {
          ...decision,
          mode: "one-time",
          reason: `${context.refusal.error}: ${context.refusal.message}; paying once instead`,
        };
      }
      const option =
        decision.mode === "subscribe"
          ? view.subscriptionOption
          : decision.mode === "channel"
            ? view.channelOption
            : view.oneTimeOption;
      if (option === undefined) return undefined;
      if (allowance !== undefined && decision.mode === "subscribe" && plan !== undefined) {
        // Subscribing is decided across the spender's sales (its budget, calls and policy), and its
        // period is its own spend: the sale's allowance holds only what the call costs past it (overage).
        crossSale = true;
      } else if (allowance !== undefined) {
        if (!allowance.take(BigInt(option.amount))) {
          throw callAllowanceExceeded(capability.name, allowance, BigInt(option.amount));
        }
        allowanceHeld += BigInt(option.amount);
      }
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
      if (decision.mode === "channel") {
        // The deposit is held in the budget when the wallet opens the channel (channelCommitments.ts);
        // each voucher is recorded against that hold once the call is answered.
        const terms = channelTermsOf(option);
        if (terms !== undefined && decision.deposit !== undefined) {
          options.channels?.plan(terms, decision.deposit, seller);
        }
        chosen = option;
        return option;
      }
      const kind = decision.mode === "subscribe" ? "subscription" : "one-time";
      const reservation = await reserveFor({
        amount: BigInt(option.amount),
        provider: seller,
        kind,
        ...(kind === "subscription" ? { ref: `plan:${plan?.planId ?? "?"}@${seller}` } : {}),
      });
      reservations.push(reservation);
      if (option.scheme === "exact") heldFor.set(option.memo, reservation);
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
        const reservation = await reserveFor({ amount: payment.amount, provider, kind: "one-time" });
        reservations.push(reservation);
        x402Held = { reservation, payment, from: payer.account.address };
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
    const kept = keptSubscriptionsPayer(payer, keeper, () => subscribeTerms);
    /**
     * A payment whose `/authorize` failed is read back by its nonce: settled after all, the call goes
     * on with its proof; outcome unknown, its reservation stays held (pending) instead of released.
     */
    const keptPayer: typeof kept = {
      ...kept,
      pay: (async (option: PaymentOption, payOptions: Parameters<typeof payer.pay>[1]) => {
        try {
          return await kept.pay(option as never, payOptions as never);
        } catch (error) {
          const reservation = heldFor.get(option.memo);
          if (reservation === undefined || typeof payer.payment !== "function") throw error;
          try {
            return await recoverPayment(option, error, reservation, {
              agent,
              budget,
              payer,
              clock,
              wait,
              target,
            });
          } catch (recovered) {
            if (isTollgateError(recovered) && recovered.details?.pending === true) {
              // Held in the ledger as pending: not this call's to commit or release any more.
              const at = reservations.indexOf(reservation);
              if (at >= 0) reservations.splice(at, 1);
              pendingAmount += reservation.amount;
              if (lostTargets.size < MAX_LOST_TARGETS) {
                lostTargets.set(String(recovered.details.nonce).toLowerCase(), target);
              }
            }
            throw recovered;
          }
        }
      }) as typeof kept.pay,
    };
    const reached = reachSeller(fetch);
    /** Vouchers this call sent and how each was answered (a channel pays up front, without a 402). */
    const vouchers: { status: number }[] = [];
    const observed: FetchFn =
      options.channels === undefined
        ? reached
        : async (input, init) => {
            const headers = input instanceof Request ? input.headers : new Headers(init?.headers);
            const carried = headers.has(CHANNEL_VOUCHER_HEADER);
            const answer = await reached(input, init);
            if (carried) vouchers.push({ status: answer.status });
            return answer;
          };
    const paidFetch = fetchWithPayment(
      observed,
      options.channels === undefined ? keptPayer : withChannelWallet(keptPayer, options.channels.wallet),
      fetchOptions,
    );
    /**
     * What the vouchers of this call paid: the route's price for a voucher the gate served (a refused
     * or failed one is credit for the next call). The ledger records the channels' totals from the hold.
     */
    const channelPaid = async (): Promise<bigint> => {
      if (options.channels === undefined || vouchers.length === 0) return 0n;
      const served = vouchers.filter((v) => v.status < 500 && v.status !== 402).length;
      vouchers.length = 0;
      await options.channels.record();
      if (served === 0) return 0n;
      const terms = options.channels.wallet.routeTerms(firstRequest.method, firstRequest.url);
      return (terms?.price ?? BigInt(chosen?.amount ?? "0")) * BigInt(served);
    };
    let byChannel = false;
    /** The seller answered an error: its code and message, and what it was paid for the call. */
    const sellerFailure = (status: number, text: string): SellerError => {
      const seller = errorOf(text);
      const code = seller?.code ?? `HTTP${status}`;
      const paidNote =
        paidAmount > 0n
          ? ` after being paid ${formatUnitsExact(paidAmount)} USDC${transaction === undefined ? "" : ` (transaction ${transaction})`}`
          : pendingAmount > 0n
            ? ` after being sent a payment of ${formatUnitsExact(pendingAmount)} USDC, held in the budget until it is known whether it settled`
            : "";
      return new SellerError(
        code,
        `${capability.name} answered ${status} ${code}${paidNote}${seller?.message === undefined ? "" : `: ${seller.message}`}`,
      );
    };

    /**
     * The seller answered the x402 payment with an error, or not at all: unless its `PAYMENT-RESPONSE`
     * says it settled, its facilitator may still settle it until it expires, or never. With a chain to
     * read it back, the payment is held pending (src/agent/budget/pendingPayments.ts) instead of being
     * counted as spent; the ledger then records what the chain shows.
     */
    const pendUnsettledX402 = async (response: Response | undefined): Promise<void> => {
      const held = x402Held;
      x402Held = undefined;
      if (held === undefined || options.chain === undefined) return;
      if (response !== undefined && saysSettled(response)) return;
      await budget.pend(held.reservation, {
        payer: held.from,
        nonce: held.payment.nonce,
        validBefore: held.payment.validBefore,
        token: held.payment.asset,
        target,
      });
      const at = reservations.indexOf(held.reservation);
      if (at >= 0) reservations.splice(at, 1);
      paidAmount -= held.payment.amount;
      pendingAmount += held.payment.amount;
    };

    /** Set when a failed call was charged metered overage (the gate let it through). */
    let meteredFailure = false;
    /**
     * Records what one metered call cost: what the gate states, but never less than the listing's units
     * per call give on the tool's own count (meteredCharge.ts), since the seller is not trusted with the
     * ledger. Past the included units the gate deducts the overage on chain; the budget records it now,
     * from the subscription's hold. The watcher charges the hold's running total from the chain
     * (`charge({ total })`): only what the chain pulled beyond what is recorded is new.
     */
    const chargeMetered = async (
      plan: MeteredPlan,
      stated: ReturnType<typeof readStatedCharge>,
    ): Promise<bigint> => {
      const { charge: overage } = meteredCharge(stated, listedUnitsPerCall(listing, plan.planId), (units) =>
        meter.count(plan, clock.now(), units),
      );
      if (overage === 0n) return 0n;
      const heldId = payer.subscriptions?.forOrigin(origin)?.subscriptionId;
      if (heldId === undefined || !(await keeper.chargeUsage(heldId, overage))) {
        const r = await reserveFor({ amount: overage, provider: plan.provider, kind: "metered" });
        await budget.commit(r, overage);
      }
      return overage;
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
            attempt === 0 && usedSubscription === false
              ? (redeemable.take(target, clock.now()) ?? (await takeKeptProof(target)))
              : undefined;
          if (redeemed !== undefined) request.headers.set(HeaderName.Payment, redeemed.header);
          response = await paidFetch(request);
          // Answered 5xx again (and no new payment was made): the seller gave the proof back once more.
          if (redeemed !== undefined && response.status >= 500 && paidAmount === 0n) {
            redeemable.keep(target, redeemed);
          }
        } catch (error) {
          // A subscription for a sale that the budget refused before paying: pay this call once instead.
          if (
            crossSale &&
            !payOnce &&
            paidAmount === 0n &&
            (isTollgateError(error, "BudgetExceeded") || isTollgateError(error, "ApprovalDenied"))
          ) {
            payOnce = true;
            crossSale = false;
            await settleReservations(budget, reservations, 0n);
            continue;
          }
          // Refused for the cap the agent set itself: raise it within the budget and try again. The
          // refusal charged nothing, so a retry cannot pay twice.
          if (!isTollgateError(error, "AllowanceExhausted") || attempt >= CAP_RAISE_RETRIES) throw error;
          if (attempt === 0 && !(await raiseOverageCap())) throw error;
          // The gate may still hold the old cap for a moment: later retries give it time to re-read.
          if (attempt > 0) await wait(CAP_RAISE_RETRY_MS);
        }
      }
      // An x402 payment answered with an error is held pending (not committed) when it can be read back.
      if (!response.ok) await pendUnsettledX402(response);
      // Answered: an x402 payment still here is committed now, and a later fault must not pend it.
      x402Held = undefined;
      await settleReservations(budget, reservations, paidAmount - keeperCharged);
      const viaChannel = await channelPaid();
      if (viaChannel > 0n) {
        byChannel = true;
        paidAmount += viaChannel;
        provider ??=
          listing?.seller ??
          options.channels?.wallet.routeTerms(firstRequest.method, firstRequest.url)?.payee;
      }
      await recordDemand(options, agent, offer, meter.planAt(origin));
      if (offer?.channel !== undefined && offer.subscription === undefined && decision?.mode !== "refuse") {
        options.calls?.record(
          { agent, provider: offer.provider, planId: "channel" },
          CHANNEL_HORIZON_SECONDS,
        );
      }
      if (decision?.mode === "one-time" && offer?.subscription !== undefined) {
        options.calls?.record(
          { agent, provider: offer.provider, planId: offer.subscription.planId },
          offer.subscription.interval,
        );
      }
      const text = await response.text();
      if (!response.ok) {
        // A metered call the gate let through is charged whatever the handler answered (the usage
        // ledger has no undo, docs/gate.md): when the gate states the charge, it is recorded now, not
        // at the watcher's next sync (which then finds it recorded: the hold's running total).
        const plan =
          usedSubscription && chosen?.scheme !== "exact" && !x402Paid ? meter.planAt(origin) : undefined;
        const stated = plan === undefined ? undefined : readStatedCharge(response.headers, plan);
        if (plan !== undefined && stated !== undefined) {
          provider ??= plan.provider;
          const overage = await chargeMetered(plan, stated);
          if (overage > 0n) {
            paidAmount += overage;
            meteredFailure = true;
          }
        }
        throw sellerFailure(response.status, text);
      }
      let mode: SpendMode = byChannel
        ? "channel"
        : chosen?.scheme === "subscription"
          ? "subscription"
          : chosen !== undefined || x402Paid || redeemed !== undefined
            ? "one-time"
            : "free";
      const metered = usedSubscription && mode !== "one-time" ? meter.planAt(origin) : undefined;
      if (metered !== undefined) {
        provider ??= metered.provider;
        if (mode === "free") mode = "subscription";
        const overage = await chargeMetered(metered, readStatedCharge(response.headers, metered));
        if (overage > 0n) {
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
      // Sent and never answered (a connection cut): the same as an error answer without a settlement.
      await pendUnsettledX402(undefined).catch((e: unknown) =>
        options.logger?.warn({ err: e }, "an unanswered x402 payment could not be held pending"),
      );
      await settleReservations(budget, reservations, paidAmount - keeperCharged).catch(() => undefined);
      const viaChannel = await channelPaid().catch(() => 0n);
      if (viaChannel > 0n) {
        byChannel = true;
        paidAmount += viaChannel;
      }
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
        mode: meteredFailure
          ? "metered"
          : byChannel || chosen?.scheme === "channel"
            ? "channel"
            : chosen?.scheme === "subscription"
              ? "subscription"
              : "one-time",
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
          mode: !paid
            ? "free"
            : meteredFailure
              ? "metered"
              : byChannel
                ? "channel"
                : chosen?.scheme === "subscription"
                  ? "subscription"
                  : "one-time",
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

/** A `PAYMENT-RESPONSE` (x402) that says the payment settled. */
function saysSettled(response: Response): boolean {
  const header = response.headers.get(HeaderName.X402PaymentResponse);
  if (header === null) return false;
  const decoded = safeDecodeJsonHeader(header, X402SettleResponseSchema);
  return decoded.ok && decoded.value.success;
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
