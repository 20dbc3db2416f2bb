/**
 * The payer's types that scheme client parts share with it: what it signs with, what a settled payment
 * returns, what its parts are built with, and the seam through which x402 servers are paid.
 */
import type { Address, Hex } from "viem";
import type { WriteClient } from "../chain/clientTypes.ts";
import type { TypedDataSigner } from "../chain/signers/typedDataSigner.ts";
import type { FacilitatorClient } from "../http/facilitatorClient.ts";
import type { Clock } from "../protocol/clock.ts";
import type { AuthorizeResponse } from "../protocol/facilitator.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import type { X402PaymentRequired } from "../protocol/x402.ts";

/** EIP-191 message signing (a viem `LocalAccount` has it): sub-auth tokens and reads of one's payments. */
export type MessageSigner = { signMessage(args: { message: string }): Promise<Hex> };

/**
 * What the payer signs with: an address and EIP-712 signing; a viem `LocalAccount` satisfies it.
 * Subscriptions also need EIP-191 `signMessage` (for sub-auth tokens), which a `LocalAccount` has.
 */
export type PayerSigner = TypedDataSigner & Partial<MessageSigner>;

/** A settled payment: the proof, ready-made as the `X-PAYMENT` header value. */
export type PaymentReceipt = {
  option: PaymentOption;
  proof: PaymentProof;
  /** `base64(JSON(proof))` for `X-PAYMENT`. */
  header: string;
  /** The settling transaction, when the facilitator reported it. */
  settled: AuthorizeResponse["settled"];
};

/**
 * Pays a server that speaks only x402 v2 and returns the header to retry with (`PAYMENT-SIGNATURE`),
 * or `undefined` to decline. The seam through which standard x402 servers are paid.
 */
export type PayX402 = (
  paymentRequired: X402PaymentRequired,
  context: { request: Request; maxPrice: bigint },
) => Promise<{ name: string; value: string } | undefined>;

export type OriginSubscription = { subscriptionId: bigint; planId: string; audience: string };

export type PayOptions = {
  /** The most this payment may cost: a bigint of smallest units or USDC text (`"0.50"`). */
  maxAmount: bigint | string;
  signal?: AbortSignal | undefined;
};

/**
 * The subscriptions a payer holds — those it made with `subscribe` and any it was told of — by plan,
 * and which gate origins each one serves (so `fetchWithPayment` sends its headers up front).
 */
export type PayerSubscriptions = {
  forPlan(planId: bigint | string): bigint | undefined;
  /** The subscription sent up front to a gate origin, and the audience its tokens name. */
  forOrigin(origin: string): OriginSubscription | undefined;
  /**
   * Records a subscription, and optionally a gate origin it serves (`audience`: the origin the gate
   * expects in tokens, when it differs from the origin requested, e.g. behind a proxy).
   */
  remember(entry: {
    planId: bigint | string;
    subscriptionId: bigint;
    origin?: string | undefined;
    audience?: string | undefined;
  }): void;
  /** Stops sending a subscription up front to `origin`. */
  unbind(origin: string): void;
  /** Forgets a subscription everywhere (after cancelling it). */
  forget(subscriptionId: bigint): void;
  /**
   * The subscription to `planId` this payer holds, or the one `create` makes; concurrent callers for
   * one plan share a single `create`, so a plan is subscribed to once.
   */
  ensure(
    planId: bigint | string,
    create: () => Promise<bigint>,
  ): Promise<{ subscriptionId: bigint; created: boolean }>;
};

/**
 * What the parts of a payer are built with (`createPayer`): its signer, chain, facilitator and
 * settings, checked once.
 */
export type PayerContext = {
  account: PayerSigner;
  network: Network;
  chainId: number;
  facilitator: FacilitatorClient;
  clock: Clock;
  /** Longest validity of an authorization, seconds; the offer's expiry caps it too. */
  validForSeconds: number;
  /** For subscribing directly on chain (pays gas), when given. */
  walletClient: WriteClient | undefined;
  /** The token's EIP-712 `{ name, version }` (configured, or the facilitator's `/supported`). */
  tokenDomainOf(token: Address): Promise<{ name: string; version: string }>;
};

/**
 * Pays one option once and returns its receipt (`payer.pay(option)`), checked against `ceiling` when
 * there is one.
 */
export type PayOnce = (
  option: PaymentOption,
  ceiling: bigint | undefined,
  signal: AbortSignal | undefined,
) => Promise<PaymentReceipt>;
