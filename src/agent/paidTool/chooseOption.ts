/**
 * A paid call's answer to a 402 (`fetchWithPayment`'s `choose`): the offer is held to the seller's
 * listing before anything is weighed (src/agent/offerCheck.ts), the policy decides how to pay
 * (src/agent/policy/decide.ts), and the scheme part carrying out its choice holds the allowance and the
 * budget before anything is signed.
 */
import type { ChooseContext } from "../../client/fetchOptions.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { checkPaymentRequired, checkPinnedPayee, type PayeePins } from "../offerCheck.ts";
import { decide, type PolicyDecision } from "../policy/decide.ts";
import {
  type OfferFromPaymentRequired,
  offerFromPaymentRequired,
} from "../policy/offerFromPaymentRequired.ts";
import { learnedForecast } from "../policy/runningForecast.ts";
import type { CallSpend } from "./callSpend.ts";
import type { PaidToolCoreOptions } from "./paidToolTypes.ts";
import type { CallPurchase, PurchaseCall, PurchaseTool, SchemePurchase } from "./purchasePart.ts";

/** A scheme's part in the call: the scheme and its hooks in this call. */
export type CallPart = { scheme: SchemePurchase; hooks: CallPurchase };

/** The option of the policy's view that carries out each of its choices. */
const optionOfChoice = {
  "one-time": (view) => view.oneTimeOption,
  subscribe: (view) => view.subscriptionOption,
  channel: (view) => view.channelOption,
} satisfies Record<
  Exclude<PolicyDecision["mode"], "refuse">,
  (view: OfferFromPaymentRequired) => PaymentOption | undefined
>;

/** What `chooseOption` reads and records: the call, its parts, and the tool. */
export type ChoosingCall = PurchaseCall & {
  offer: PurchaseCall["offer"];
  decision: PurchaseCall["decision"];
  chosen: PurchaseCall["chosen"];
  /** The scheme of the option the policy's choice paid with. */
  chosenScheme: SchemePurchase | undefined;
  readonly spend: CallSpend;
  readonly parts: readonly CallPart[];
  readonly tool: PurchaseTool;
  readonly options: PaidToolCoreOptions;
  /** Payees pinned per origin, for a tool without a listing. */
  readonly payees: PayeePins;
  /** The schemes the tool knows, whose agent parts check and weigh each option. */
  readonly schemes: AgentSchemes;
};

export async function chooseOption(
  call: ChoosingCall,
  context: ChooseContext,
): Promise<PaymentOption | undefined> {
  const read = await readOffer(call, context);
  if (read === undefined) return undefined;
  const { view, seller } = read;
  call.offer = view.offer;
  call.provider = seller;
  const decision = await weigh(call, view, seller, context);
  call.decision = decision;
  if (decision.mode === "refuse") return undefined;
  const option = optionOfChoice[decision.mode](view);
  if (option === undefined) return undefined;
  // The option's scheme carries the choice out: an option of no known scheme is not paid.
  const part = call.parts.find((p) => p.scheme.id === option.scheme);
  if (part === undefined) return undefined;
  await part.hooks.hold?.({ option, decision, view, seller });
  call.chosen = option;
  call.chosenScheme = part.scheme;
  return option;
}

/** The 402 held to the listing (a mismatch throws `OfferMismatch`), as the policy sees it, and its seller. */
async function readOffer(call: ChoosingCall, context: ChooseContext) {
  const { payer, name } = call.tool;
  const { listing } = call.options;
  const checked =
    listing === undefined
      ? context.paymentRequired
      : checkPaymentRequired(context.paymentRequired, listing, name, call.schemes);
  const view = offerFromPaymentRequired(checked, { network: payer.network, schemes: call.schemes });
  if (view === undefined) return undefined;
  // The seller's identity keys its spends: the listing's signer, else the payee pinned for the origin.
  const seller =
    listing?.seller ??
    (await checkPinnedPayee(
      checked.accepts.filter((o) => o.network === payer.network).map((o) => o.payTo),
      call.payees,
      call.tool.origin,
      name,
    )) ??
    view.offer.provider;
  // The gate refused the subscription this call carried: only paying once can serve it now; with
  // no one-time price the refusal is the answer (and an exhausted cap may be raised, see the retry).
  if (context.refusal !== undefined && view.oneTimeOption === undefined) return undefined;
  for (const p of call.parts) p.hooks.admit?.(view, context);
  return { view, seller };
}

/** The policy's decision on the offer, within the budget (and the sale a purchase serves); refusing throws. */
async function weigh(
  call: ChoosingCall,
  view: OfferFromPaymentRequired,
  seller: string,
  context: ChooseContext,
): Promise<PolicyDecision> {
  const { agent, budget } = call.tool;
  const { options } = call;
  const report = await budget.report(agent);
  const sale = await call.spend.saleWeight(seller, view.offer.oneTime?.amount ?? 0n);
  const plan = view.offer.subscription;
  const history = callHistory(call, view);
  const learned =
    plan === undefined || options.demand === undefined
      ? undefined
      : await learnedForecast(
          options.demand,
          { agent, provider: view.offer.provider, planId: plan.planId },
          { intervalSeconds: plan.interval, prior: options.forecast?.() },
        );
  let decision = decide(
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
    throw new TollgateError("BudgetExceeded", decision.reason, { details: { tool: call.tool.name } });
  }
  for (const p of call.parts) decision = p.hooks.revise?.(decision, view, context) ?? decision;
  return decision;
}

/** Calls already made under the first way of paying the offer that counts them (the break-even rule's history). */
function callHistory(call: ChoosingCall, view: OfferFromPaymentRequired): number | undefined {
  const { calls, agent } = call.tool;
  if (calls === undefined) return undefined;
  for (const { scheme } of call.parts) {
    const key = scheme.purchase.callsKey?.(view.offer);
    if (key !== undefined) {
      return calls.count({ agent, provider: view.offer.provider, planId: key.planId }, key.seconds);
    }
  }
  return undefined;
}
