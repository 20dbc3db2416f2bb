/**
 * The options of `fetchWithPayment` (docs/client.md) and the chooser's types: a leaf of the client, so
 * the scheme client parts that read their own settings from these options (`subscription`, `payX402`)
 * need not load `fetchWithPayment` itself.
 */
import type { Clock } from "../protocol/clock.ts";
import type { GateErrorCode } from "../protocol/errors.ts";
import type { PaymentOption, PaymentRequired } from "../protocol/paymentRequired.ts";
import type { ClientPayment, Scheme, SchemeId } from "../schemes/types.ts";
import type { TokenAmountInput } from "./parseTokenAmount.ts";
import type { PaymentReceipt, PayX402 } from "./payerTypes.ts";

export type ChooseContext = {
  request: Request;
  paymentRequired: PaymentRequired;
  /** The ceiling in smallest units. */
  maxPrice: bigint;
  /** Options the payer can pay (scheme, network and facilitator match) within the ceiling, cheapest first. */
  affordable: PaymentOption[];
  /**
   * Set when the gate refused the subscription this request carried (`SubscriptionNotActive`,
   * `AllowanceExhausted`, `SubscriptionAuthInvalid`): return an `exact` option to pay once instead, or
   * anything else to have the refusal thrown as a `TollgateError` with its code.
   */
  refusal?: { error: GateErrorCode; message: string; subscriptionId: bigint };
};

/** A subscription `fetchWithPayment` took out or started using for a request. */
export type SubscriptionUse = {
  planId: string;
  subscriptionId: bigint;
  /** True when this call subscribed (the first period was charged); false for one already held. */
  created: boolean;
  option: PaymentOption;
};

/**
 * Picks the option to pay from a 402, or `undefined` to decline (the 402 is then returned to the
 * caller). May throw to refuse with a reason (e.g. `BudgetExceeded`). The default takes the cheapest
 * affordable option.
 */
export type ChoosePaymentOption = (
  options: PaymentOption[],
  context: ChooseContext,
) => PaymentOption | undefined | Promise<PaymentOption | undefined>;

export type FetchWithPaymentOptions = {
  /** The most one payment may cost: a bigint of smallest units or USDC text (`"0.50"`). Required. */
  maxPrice: bigint | string;
  choose?: ChoosePaymentOption;
  /** Fresh 402s paid after the gate refused a proof (default 2). */
  maxProofRetries?: number;
  /** Times the same proof is re-sent after the paid request is answered 5xx (default 2, at most 10). */
  maxServerErrorRetries?: number;
  /**
   * Wait before re-sending after a 5xx without `Retry-After` (default 500 ms). A gate sharing its
   * replay guard may hand the proof back a moment after its 5xx leaves, so an immediate re-send could
   * be refused.
   */
  serverErrorRetryDelayMs?: number;
  /** The longest wait honoured (`Retry-After` included); a longer one ends the call (default 10 s). */
  maxServerErrorRetryDelayMs?: number;
  /** Waits between re-sends; default `setTimeout`. */
  sleep?: (ms: number) => Promise<void>;
  /** Tells whether a proof would expire before a re-send; default the system clock. */
  clock?: Clock;
  /**
   * Pays a 402 that carries only x402's `PAYMENT-REQUIRED`. Default: `createPayX402(payer)` (the payer's
   * account signs an EIP-3009 `exact` payment) — unless `choose` is given: a caller that chooses (a
   * budget policy) must also pass `payX402`, so that no x402 spend bypasses it.
   */
  payX402?: PayX402;
  /** Told of each settled payment (for ledgers and logs). */
  onPayment?: (receipt: PaymentReceipt, request: Request) => void;
  /**
   * Subscribing. `maxPrice` (a bigint of smallest units or USDC text) allows the default chooser to
   * subscribe to a plan the gate flags with `subscriptionScheme: true`, priced at most that per
   * period, instead of paying once; without it the default chooser only pays once. `maxOverage`
   * (default 0: included units only) and `approval` (default 12 periods) are the terms of
   * subscriptions taken out, by the default chooser or when a custom `choose` picks a plan: token
   * units as a number or text (`2`, `"2.50"`), or a bigint of smallest units.
   */
  subscription?: {
    maxPrice?: bigint | string | undefined;
    maxOverage?: TokenAmountInput | undefined;
    approval?: TokenAmountInput | undefined;
  };
  /**
   * What to do when the gate refuses the subscription held for its origin as not active (paused,
   * past due, renewal overdue): `"error"` throws `SubscriptionNotActiveError` (the default chooser's
   * default); `"pay-once"` pays that call once instead (within `maxPrice`, through `choose` when one is
   * given) and keeps the subscription for later calls. With a custom `choose` and no setting, `choose`
   * decides from `context.refusal`.
   */
  onSubscriptionInactive?: "error" | "pay-once";
  /** Told when a request starts using a subscription (and whether it was just taken out). */
  onSubscribe?: (use: SubscriptionUse, request: Request) => void;
  /**
   * Payment schemes besides the built-in ones (`src/schemes`, docs/schemes.md): their client parts
   * pay options of their scheme (compared with `exact` options by the price of one call) and may send
   * a credential up front. Built-in ids cannot be replaced.
   */
  schemes?: readonly Scheme[];
  /** Told of each payment made by a scheme other than `exact` (whose payments go to `onPayment`). */
  onSchemePayment?: (payment: ClientPayment & { scheme: SchemeId }, request: Request) => void;
};
