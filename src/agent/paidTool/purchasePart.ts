/**
 * What a paid tool asks of a scheme's agent part when it buys (docs/architecture.md, "The scheme
 * seam"): the core of a purchase (src/agent/paidTool/paidCall.ts) reads the 402, decides with the
 * policy, holds the budget, sends, settles and reports, and asks the schemes' parts at fixed steps
 * instead of switching on scheme names. The option the policy chose is carried out by the part of its
 * `scheme`; every part is asked at the other steps. A part is built once per tool (`tool`), then once
 * per call; every hook of a call is optional.
 *
 * Order: hooks run in the schemes' order (the agent's built-ins, then extra schemes). Payer and fetch
 * wrappers apply in that order, so a part whose wrapper sets a payer's non-enumerable member (the
 * channel wallet) comes after those that copy the payer.
 *
 * Invariant: this file imports types only, of the agent's leaf modules, so a scheme's part can import
 * it without loading the agent's list of built-ins.
 */
import type { Logger } from "pino";
import type { Address } from "viem";
import type { ReadClient } from "../../chain/clientTypes.ts";
import type { Payer } from "../../client/createPayer.ts";
import type { ChooseContext, FetchWithPaymentOptions } from "../../client/fetchOptions.ts";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { ManifestPricing } from "../../protocol/manifest.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import type { X402PaymentRequired } from "../../protocol/x402.ts";
import type { ClientPayment } from "../../schemes/types.ts";
import type { BudgetLedger, Reservation, ReserveRequest } from "../budget/createBudgetLedger.ts";
import type { CallAllowance } from "../callAllowance.ts";
import type { CallCounter } from "../policy/createCallCounter.ts";
import type { PolicyDecision, PolicyForecast } from "../policy/decide.ts";
import type { PolicyOffer } from "../policy/policyOffer.ts";
import type { SpendMode } from "../spendReport.ts";
import type { UsageMeter } from "./usageMeter.ts";

/**
 * A paid tool's options that schemes' parts read (`paidTool({ channels })`): each scheme adds its own
 * by declaration merging from its folder, so the agent core names none of them.
 *
 * @example
 * declare module "../../../agent/paidTool/purchasePart.ts" {
 *   interface PaidToolSchemeOptions { channels?: AgentChannels | undefined }
 * }
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled by declaration merging, one entry per scheme.
export interface PaidToolSchemeOptions {}

/** What the seller listed for the tool, as a part reads it. */
export type PurchaseListing = { seller: Address; pricing: readonly ManifestPricing[] };

/** What a part is given once per paid tool. */
export type PurchaseTool = {
  /** The tool's (capability's) name. */
  readonly name: string;
  readonly origin: string;
  readonly agent: string;
  readonly payer: Payer;
  readonly budget: BudgetLedger;
  readonly clock: Clock;
  readonly meter: UsageMeter;
  readonly listing: PurchaseListing | undefined;
  readonly calls: CallCounter | undefined;
  readonly forecast: (() => PolicyForecast | undefined) | undefined;
  readonly chain: ReadClient | undefined;
  readonly logger: Pick<Logger, "info" | "warn"> | undefined;
  wait(ms: number): Promise<void>;
  /**
   * An x402 server's 402 held to the listing (`OfferMismatch` when it asks more), and the payee pinned
   * for the origin when the tool has no listing (src/agent/offerCheck.ts).
   */
  checkX402(
    paymentRequired: X402PaymentRequired,
  ): Promise<{ checked: X402PaymentRequired; pinned?: Address | undefined }>;
  /** The tool's options as given, for a scheme's own settings (`subscriptions`, `channels`). */
  readonly options: Readonly<PaidToolSchemeOptions> & {
    /** The `wait` the tool was given, if any (`wait` above defaults it). */
    readonly wait?: ((ms: number) => Promise<void>) | undefined;
  };
};

/** The money of one call (src/agent/paidTool/callSpend.ts), as a part moves it. */
export type PurchaseSpend = {
  /** The allowance of the sale the call serves (a reseller's purchase), if any. */
  readonly allowance: CallAllowance | undefined;
  /** Paid for the call so far. */
  paid: bigint;
  /** Held for payments whose outcome is unknown (pending in the ledger). */
  pending: bigint;
  /** Part of `paid` a scheme recorded in the ledger itself (a first subscription period). */
  selfRecorded: bigint;
  /** `selfRecorded` is the spender's own across its sales, not the sale's. */
  ownAcrossSales: boolean;
  /** Holds `amount` against the sale's allowance, when the call serves one; throws when it has no room. */
  takeAllowance(amount: bigint): void;
  /** Reserves in the budget (within the sale's reservation for a sale's purchase). */
  reserve(request: ReserveRequest & { provider: string }): Promise<Reservation>;
  /**
   * Reserves and keeps the reservation to settle with what the call paid; with `memo`, a payment of
   * that option whose answer is lost keeps it (held pending).
   */
  hold(request: ReserveRequest & { provider: string }, memo?: string): Promise<Reservation>;
  /** A reservation the ledger now holds as pending: no longer the call's to commit or release. */
  untrack(reservation: Reservation): void;
  /** Commits what was paid across the reservations and releases the rest. */
  settleReservations(): Promise<void>;
};

/** One paid call as a part sees it: the money (`spend`) and what the call reports. */
export type PurchaseCall = {
  /** The call's first request (retries send copies). */
  readonly request: Request;
  /** `METHOD URL` of the call: a lost payment and a given-back proof are kept by it. */
  readonly target: string;
  readonly spend: PurchaseSpend;
  readonly offer: PolicyOffer | undefined;
  readonly decision: PolicyDecision | undefined;
  /** The option the policy's choice paid with. */
  readonly chosen: PaymentOption | undefined;
  /** The seller the call's spends are keyed by. */
  provider: string | undefined;
  transaction: string | undefined;
  subscriptionId: string | undefined;
  /** The call paid one time (its chosen scheme `paysOnce`, or an x402 payment), not under a held subscription. */
  paidOnce: boolean;
  /** Set by a part when a failed call was charged anyway (`metered`: the gate let it through). */
  failureMode: SpendMode | undefined;
};

/** A 402 as the policy weighs it (policy/offerFromPaymentRequired.ts): the offer and each choice's option. */
export type PurchaseOffer = {
  offer: PolicyOffer;
  oneTimeOption: PaymentOption | undefined;
  subscriptionOption: PaymentOption | undefined;
  channelOption: PaymentOption | undefined;
};

/** The policy's choice as the part carrying it out sees it. */
export type PurchaseChoice = {
  option: PaymentOption;
  decision: PolicyDecision;
  view: PurchaseOffer;
  /** The seller's identity: the listing's signer, else the pinned payee, else the offer's provider. */
  seller: Address;
};

/** What a part paid for a call besides the payer's receipts (vouchers sent up front). */
export type PaidAside = { amount: bigint; provider?: string | undefined };

/** A part's hooks in one call, in the order the call reaches them. */
export type CallPurchase = {
  /** The payer the call pays through, wrapped (a subscription keeper, a channel wallet). */
  payer?(payer: Payer): Payer;
  /** The fetch the call sends through, wrapped (to see what was sent up front). */
  fetch?(fetch: FetchFn): FetchFn;
  /** Options for `fetchWithPayment` this part adds (`payX402`, `onSubscribe`). */
  fetchOptions?(): Partial<FetchWithPaymentOptions>;
  /** Narrows the 402's offer before the policy weighs it (deletes what the agent cannot take; throws to refuse). */
  admit?(view: PurchaseOffer, context: ChooseContext): void;
  /** Revises the policy's decision (paying once where a subscription cannot serve). */
  revise?(decision: PolicyDecision, view: PurchaseOffer, context: ChooseContext): PolicyDecision;
  /** The policy chose an option of this part's scheme: hold its allowance and budget before anything is signed. */
  hold?(choice: PurchaseChoice): Promise<void>;
  /** Its scheme's client part paid an option (a payment that is no proof receipt): count what it cost. */
  schemePaid?(payment: ClientPayment): void;
  /** Before the first request (hold what a call under held access may cost). */
  beforeSend?(): void;
  /** True when the call is sent under access held already: no given-back proof is presented. */
  holdsAccess?(): boolean;
  /** A send failed with `error` on try `attempt`: true to send again (after doing what makes it pass). */
  retry?(error: unknown, attempt: number): Promise<boolean>;
  /** The seller answered, before the call's reservations settle. */
  answered?(response: Response): Promise<void>;
  /** The call failed before the seller answered it (or the answer was not read). */
  unanswered?(): Promise<void>;
  /** What this part paid besides the payer's receipts, now that the call is over. */
  paidAside?(): Promise<PaidAside | undefined>;
  /** The call is answered and its spend settled: count it. */
  counted?(): void;
  /** The seller answered with an error: charge what it cost anyway. */
  failed?(response: Response): Promise<void>;
  /** The seller served the call, reported as `mode`: charge what it cost and say how it was paid. */
  served?(response: Response, mode: SpendMode): Promise<{ mode: SpendMode; offer?: PolicyOffer | undefined }>;
};

/** A scheme's part in a paid tool's purchases (`AgentSchemePart.purchase`). */
export type PurchasePart = {
  /** A call that chose an option of this scheme paid one time (a held plan's meter is not charged for it). */
  readonly paysOnce?: boolean | undefined;
  /**
   * The spend mode of a served call paid with an option of this scheme when nothing was paid aside
   * (default: the scheme's `offer.spendMode`).
   */
  readonly servedMode?: SpendMode | undefined;
  /** The key and window the agent's calls are counted under for this way of paying, when the offer has it. */
  callsKey?(offer: PolicyOffer): { planId: string | undefined; seconds: number } | undefined;
  /** Built once per tool; returns the part of each call. */
  tool(tool: PurchaseTool): (call: PurchaseCall) => CallPurchase;
};

/** A scheme as a paid tool buys through it: its id, how its spends are reported, and its purchase part. */
export type SchemePurchase = {
  readonly id: string;
  readonly spendMode: SpendMode | undefined;
  readonly purchase: PurchasePart;
};
