/**
 * The payer (docs/client.md): signs the EIP-3009 authorization a 402 option asks for, has the
 * facilitator settle it (`POST /authorize`), and hands back the proof the gate accepts.
 *
 * Invariants:
 * - Nothing is signed for an option the payer would not pay: wrong scheme, network, facilitator or
 *   token, a price above the caller's ceiling, a memo whose claims differ from the option's terms, or
 *   an offer that has expired.
 * - The authorization's nonce is `keccak256(utf8(memo))` (§2.3), so one offer can be paid at most
 *   once, whatever retries happen; its `validBefore` never outlasts the offer, so the facilitator
 *   cannot settle it after the gate stopped honouring the memo.
 */
import type { Address, Hex } from "viem";
import type { WriteClient } from "../chain/clientTypes.ts";
import { createFacilitatorClient, type FacilitatorClient, type FetchFn } from "../http/facilitatorClient.ts";
import { sameAddress } from "../protocol/address.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentRecord, SupportedResponse } from "../protocol/facilitator.ts";
import { chainIdOf, isNetwork, type Network } from "../protocol/network.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import type { SubscriptionInfo } from "../protocol/subscriptions.ts";
import { builtinSchemes } from "../schemes/builtinSchemes.ts";
import { payExactOption } from "../schemes/exact/client.ts";
import { createSchemeRegistry } from "../schemes/registry.ts";
import { changeSubscriptionThroughFacilitator } from "../schemes/subscription/client/facilitatorSubscriptions.ts";
import {
  type SubscribeToPlanOptions,
  subscribeToPlan,
} from "../schemes/subscription/client/subscribeToPlan.ts";
import {
  createSubscriptionAuth,
  type SubscriptionAuth,
} from "../schemes/subscription/client/subscriptionAuth.ts";
import type { Scheme } from "../schemes/types.ts";
import { fetchWithPayment } from "./fetchWithPayment.ts";
import { getPayment, paymentPath } from "./getPayment.ts";
import { parseTokenAmount, type TokenAmountInput } from "./parseTokenAmount.ts";
import { parseUsdcCeiling } from "./parseUsdcCeiling.ts";
import { payerReadHeaders } from "./payerReadHeaders.ts";
import type {
  OriginSubscription,
  PayerSigner,
  PayerSubscriptions,
  PaymentReceipt,
  PayOptions,
} from "./payerTypes.ts";
import { isRequestLike, type PaymentTerms, paymentOptionOf } from "./paymentTerms.ts";

export type CreatePayerOptions = {
  account: PayerSigner;
  /** The network this payer pays on, e.g. `eip155:8453`. */
  network: Network | string;
  /** The facilitator to settle through: its base URL or a client. */
  facilitator: string | FacilitatorClient;
  /** Used for the facilitator when `facilitator` is a URL (default: the global `fetch`). */
  fetch?: FetchFn;
  clock?: Clock;
  /**
   * EIP-712 domains by token address, instead of asking the facilitator's `/supported`
   * (`{ "0x8335…": { name: "USD Coin", version: "2" } }`).
   */
  tokens?: Record<string, { name: string; version: string }>;
  /** Longest validity of an authorization (default 300 s, at most 3600); the offer's expiry caps it too. */
  validForSeconds?: number;
  /** For `subscribe({ direct: true })`: a wallet client with this account on this network (pays gas). */
  walletClient?: WriteClient;
  /**
   * Payment schemes besides the built-in ones (docs/schemes.md), for `pay(url | request)`: their
   * client parts may pay the 402 instead of a one-time payment when one call costs less.
   */
  schemes?: readonly Scheme[];
};

export type SubscribeOptions = SubscribeToPlanOptions;

/**
 * Options of `pay(terms)`. Without `maxAmount` the price the terms state is paid: the caller holds
 * the terms it asks to pay (a URL or Request, whose price comes from the server, needs `maxAmount`).
 */
export type PayTermsOptions = Partial<PayOptions>;

/** `pay(url | request)`: the server's answer to the paid retry, and the payment that bought it. */
export type PaidResponse = {
  response: Response;
  /** The last payment made (a refused proof is paid again with a fresh 402); none for a free answer. */
  receipt: PaymentReceipt | undefined;
};

export type Payer = {
  readonly address: Address;
  readonly network: Network;
  readonly facilitator: FacilitatorClient;
  /** The signing account, for paying x402 servers directly (`createPayX402`); `createPayer` sets it. */
  readonly account?: PayerSigner;
  /**
   * The one-time flow (the specification's `agent.pay(terms)`): signs the EIP-3009 authorization,
   * has the facilitator settle it (`/authorize`) and returns the checked proof with its `X-PAYMENT`
   * value. `terms` is one 402 option, the 402 body or the 402 `Response` (its cheapest option this
   * payer can pay once). Throws `TollgateError`: `PriceCeilingExceeded`, `UnsupportedNetwork`,
   * `UnsupportedToken`, `InvalidRequest` (not terms, or terms this payer cannot pay),
   * `AuthorizationExpired` (the offer expired: ask for a fresh 402), or the facilitator's code
   * (`InsufficientFunds`, …).
   */
  pay(terms: PaymentTerms, options?: PayTermsOptions): Promise<PaymentReceipt>;
  /**
   * The whole flow for a resource: requests it, pays its 402 once within `maxAmount` (required: the
   * price comes from the server), and retries with the proof; returns the answer and the receipt.
   */
  pay(request: Request | URL | string, options: PayOptions): Promise<PaidResponse>;
  /**
   * Subscribes to a plan — gasless through the facilitator, or `{ direct: true }` from `walletClient` —
   * and returns the subscription id. The first period is charged at once. Throws `TollgateError`:
   * `PlanDeprecated` (with `details.successorPlanId`), `InsufficientFunds`, `NotFound`, …
   */
  subscribe(options: SubscribeOptions): Promise<bigint>;
  /**
   * `X-Tollgate-Sub` and `X-Tollgate-Sub-Auth` for a request to the gate at `audienceOrigin`: a token
   * signed by this payer, minted once and reused until five minutes before it expires.
   */
  subscriptionHeaders(
    subscriptionId: bigint | string,
    audienceOrigin: string,
  ): Promise<Record<string, string>>;
  /** Pauses a subscription (relayed; the paid time left is kept). Returns its state after. */
  pause(subscriptionId: bigint | string): Promise<SubscriptionInfo>;
  /** Resumes a paused subscription (relayed; charges a period if one came due). */
  resume(subscriptionId: bigint | string): Promise<SubscriptionInfo>;
  /** Cancels a subscription (relayed; final, no refund). */
  cancel(subscriptionId: bigint | string): Promise<SubscriptionInfo>;
  /** Sets the most overage deducted per period (token units as a number or text, or a bigint of smallest units), relayed. */
  setMaxOverage(subscriptionId: bigint | string, maxOverage: TokenAmountInput): Promise<SubscriptionInfo>;
  /** Sets the most ever pulled for a subscription in total (relayed; same units as `setMaxOverage`). */
  setSpendLimit(subscriptionId: bigint | string, spendLimit: TokenAmountInput): Promise<SubscriptionInfo>;
  /**
   * Reads one of this payer's payments back from the facilitator (`GET /payments/:nonce`, signed with
   * `X-Tollgate-Payer-Auth`): its status and, once settled, its proof. `nonce` is the EIP-3009 nonce,
   * keccak256 of the memo (`memoNonce(memo)`). The account needs `signMessage` (EIP-191).
   */
  payment(nonce: Hex): Promise<PaymentRecord>;
  readonly subscriptions: PayerSubscriptions;
};

const MAX_VALID_FOR_SECONDS = 3600;

/**
 * Creates a payer for one account, network and facilitator.
 *
 * @example
 * const payer = createPayer({ account: privateKeyToAccount(key), network: "eip155:8453",
 *   facilitator: "https://facilitator.example.com" });
 * const { header } = await payer.pay(option, { maxAmount: "0.50" });
 * await fetch(url, { headers: { "X-PAYMENT": header } });
 */
export function createPayer(options: CreatePayerOptions): Payer {
  if (typeof options !== "object" || options === null) {
    throw new TollgateError("InvalidRequest", "createPayer: pass { account, network, facilitator }");
  }
  const { account } = options;
  if (typeof account?.signTypedData !== "function" || typeof account.address !== "string") {
    throw new TollgateError("InvalidRequest", "createPayer: account must have an address and signTypedData");
  }
  if (!isNetwork(options.network)) {
    throw new TollgateError("UnsupportedNetwork", "createPayer: network must be a CAIP-2 eip155 id", {
      details: { network: String(options.network) },
    });
  }
  const network = options.network;
  const chainId = chainIdOf(network);
  const clock = options.clock ?? systemClock;
  const validForSeconds = options.validForSeconds ?? 300;
  if (
    !Number.isSafeInteger(validForSeconds) ||
    validForSeconds < 30 ||
    validForSeconds > MAX_VALID_FOR_SECONDS
  ) {
    throw new TollgateError(
      "InvalidRequest",
      `createPayer: validForSeconds must be 30..${MAX_VALID_FOR_SECONDS}`,
    );
  }
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new TollgateError("InvalidRequest", "createPayer: fetch must be a function");
  }
  const fetchFn = options.fetch ?? globalThis.fetch;
  // Checked now, so a bad scheme fails at construction rather than at the first paid request.
  const schemes = options.schemes ?? [];
  createSchemeRegistry(builtinSchemes, schemes);
  const facilitator =
    typeof options.facilitator === "string"
      ? createFacilitatorClient({ url: options.facilitator, fetch: fetchFn })
      : options.facilitator;
  if (typeof facilitator !== "object" || facilitator === null || typeof facilitator.url !== "string") {
    throw new TollgateError(
      "InvalidRequest",
      "createPayer: facilitator is the facilitator's base URL or a FacilitatorClient",
    );
  }
  const overrides = new Map(
    Object.entries(options.tokens ?? {}).map(([address, domain]) => [address.toLowerCase(), domain]),
  );

  let supported: Promise<SupportedResponse> | undefined;
  const tokenDomainOf = async (token: Address) => {
    const override = overrides.get(token.toLowerCase());
    if (override !== undefined) return override;
    // Cached once it succeeds; a failure is forgotten so the next payment asks again.
    supported ??= facilitator.supported().catch((error: unknown) => {
      supported = undefined;
      throw error;
    });
    const listed = (await supported).networks
      .find((n) => n.network === network)
      ?.tokens.find((t) => sameAddress(t.address, token));
    if (listed === undefined) {
      throw new TollgateError(
        "UnsupportedToken",
        "the facilitator does not settle this token on this network",
        {
          details: { token, network },
        },
      );
    }
    return listed.eip712;
  };

  let subAuth: SubscriptionAuth | undefined;
  const subscriptionAuth = (): SubscriptionAuth => {
    const { signMessage } = account;
    if (signMessage === undefined) {
      throw new TollgateError(
        "InvalidRequest",
        "sub-auth tokens need an account that can signMessage (EIP-191)",
      );
    }
    subAuth ??= createSubscriptionAuth({
      signer: { address: account.address, signMessage: (args) => signMessage.call(account, args) },
      clock,
    });
    return subAuth;
  };
  const subscriptions = createSubscriptionBook();
  const idOf = (subscriptionId: bigint | string): bigint => {
    const text = String(subscriptionId);
    if (!/^(0|[1-9][0-9]{0,77})$/.test(text)) {
      throw new TollgateError("InvalidRequest", "a subscription id is a decimal integer", {
        details: { subscriptionId: text },
      });
    }
    return BigInt(text);
  };
  const change = async (
    subscriptionId: bigint | string,
    p:
      | { action: "pause" | "resume" | "cancel" }
      | { action: "overage"; maxOverage: bigint }
      | { action: "limit"; spendLimit: bigint },
  ): Promise<SubscriptionInfo> => {
    const reply = await changeSubscriptionThroughFacilitator(facilitator, account, {
      subscriptionId: idOf(subscriptionId),
      ...p,
    });
    return reply.subscription;
  };

  /** Pays one `exact` option through the exact scheme's client, checked against the ceiling when there is one. */
  const payOption = (
    option: PaymentOption,
    ceiling: bigint | undefined,
    signal: AbortSignal | undefined,
  ): Promise<PaymentReceipt> =>
    payExactOption(
      { account, network, chainId, facilitator, clock, validForSeconds, tokenDomainOf },
      option,
      ceiling,
      signal,
    );

  /** `pay(url | request, { maxAmount })`: the request, its 402 paid once, and the paid retry. */
  const payForRequest = async (
    target: Request | URL | string,
    ceiling: bigint,
    signal: AbortSignal | undefined,
  ): Promise<PaidResponse> => {
    let receipt: PaymentReceipt | undefined;
    const paidFetch = fetchWithPayment(
      fetchFn,
      // No subscriptions: `pay` pays once, whatever this payer holds for the origin.
      {
        address: account.address,
        network,
        facilitator,
        account,
        pay: (option, p) => payOption(option, parseUsdcCeiling(p.maxAmount), p.signal),
      },
      {
        maxPrice: ceiling,
        clock,
        schemes,
        onPayment: (paid) => {
          receipt = paid;
        },
        payX402: async () => {
          throw new TollgateError(
            "InvalidRequest",
            "this server takes only x402 payments (PAYMENT-SIGNATURE): use fetchWithPayment, which pays them",
          );
        },
      },
    );
    const response = await paidFetch(
      target instanceof URL ? target.href : target,
      signal === undefined ? undefined : { signal },
    );
    return { response, receipt };
  };

  const pay = (async (terms: unknown, payOptions?: unknown) => {
    const { maxAmount, signal } = parsePayOptions(payOptions);
    if (
      isRequestLike(terms) ||
      terms instanceof URL ||
      (typeof terms === "string" && /^https?:\/\//i.test(terms))
    ) {
      if (maxAmount === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          "pay(url or request) needs { maxAmount }: the price comes from the server",
        );
      }
      return payForRequest(terms, maxAmount, signal);
    }
    const option = await paymentOptionOf(terms, { network, facilitator }, maxAmount);
    return payOption(option, maxAmount, signal);
  }) as Payer["pay"];

  return {
    address: account.address,
    network,
    facilitator,
    account,
    subscriptions,
    async subscribe(subscribeOptions) {
      const result = await subscribeToPlan(
        { signer: account, network, facilitator, walletClient: options.walletClient },
        subscribeOptions,
      );
      subscriptions.remember({ planId: result.planId, subscriptionId: result.subscriptionId });
      return result.subscriptionId;
    },
    // Async throughout, so a bad argument is a rejected promise like every other failure.
    subscriptionHeaders: async (subscriptionId, audienceOrigin) =>
      subscriptionAuth().headers(idOf(subscriptionId), audienceOrigin),
    pause: (subscriptionId) => change(subscriptionId, { action: "pause" }),
    resume: (subscriptionId) => change(subscriptionId, { action: "resume" }),
    async cancel(subscriptionId) {
      const info = await change(subscriptionId, { action: "cancel" });
      subscriptions.forget(idOf(subscriptionId));
      return info;
    },
    setMaxOverage: async (subscriptionId, maxOverage) =>
      change(subscriptionId, { action: "overage", maxOverage: parseTokenAmount(maxOverage, "maxOverage") }),
    setSpendLimit: async (subscriptionId, spendLimit) =>
      change(subscriptionId, { action: "limit", spendLimit: parseTokenAmount(spendLimit, "spendLimit") }),
    async payment(nonce) {
      const { signMessage } = account;
      if (signMessage === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          "reading a payment back needs an account that can signMessage",
        );
      }
      const signer = { signMessage: (args: { message: string }) => signMessage.call(account, args) };
      const headers = await payerReadHeaders(signer, { method: "GET", path: paymentPath(nonce) }, clock);
      return getPayment(facilitator, nonce, { headers });
    },
    pay,
  };
}

/** `pay`'s second argument: optional, and refused with a typed error when it is not options. */
function parsePayOptions(value: unknown): { maxAmount: bigint | undefined; signal: AbortSignal | undefined } {
  if (value === undefined) return { maxAmount: undefined, signal: undefined };
  if (typeof value !== "object" || value === null) {
    throw new TollgateError("InvalidRequest", "pay(terms, options?): options is { maxAmount?, signal? }");
  }
  const { maxAmount, signal } = value as { maxAmount?: unknown; signal?: unknown };
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TollgateError("InvalidRequest", "pay(): signal must be an AbortSignal");
  }
  return {
    maxAmount: maxAmount === undefined ? undefined : parseUsdcCeiling(maxAmount as bigint | string),
    signal,
  };
}

/** The payer's book of subscriptions (in memory; a payer is one process's view of one account). */
function createSubscriptionBook(): PayerSubscriptions {
  const byPlan = new Map<string, bigint>();
  const byOrigin = new Map<string, OriginSubscription>();
  const creating = new Map<string, Promise<bigint>>();
  const book: PayerSubscriptions = {
    forPlan: (planId) => byPlan.get(String(planId)),
    forOrigin: (origin) => byOrigin.get(origin),
    remember({ planId, subscriptionId, origin, audience }) {
      byPlan.set(String(planId), subscriptionId);
      if (origin !== undefined) {
        byOrigin.set(origin, { subscriptionId, planId: String(planId), audience: audience ?? origin });
      }
    },
    unbind(origin) {
      byOrigin.delete(origin);
    },
    forget(subscriptionId) {
      for (const [plan, id] of byPlan) if (id === subscriptionId) byPlan.delete(plan);
      for (const [origin, entry] of byOrigin)
        if (entry.subscriptionId === subscriptionId) byOrigin.delete(origin);
    },
    async ensure(planId, create) {
      const key = String(planId);
      const known = byPlan.get(key);
      if (known !== undefined) return { subscriptionId: known, created: false };
      let pending = creating.get(key);
      const mine = pending === undefined;
      if (pending === undefined) {
        pending = create().finally(() => creating.delete(key));
        creating.set(key, pending);
      }
      const subscriptionId = await pending;
      byPlan.set(key, subscriptionId);
      return { subscriptionId, created: mine };
    },
  };
  return book;
}
