/**
 * The payer (docs/client.md): signs the EIP-3009 authorization a 402 option asks for, has the
 * facilitator settle it (`POST /authorize`), and hands back the proof the gate accepts.
 *
 * Invariants:
 * - Nothing is signed for an option the payer would not pay: wrong scheme, network, facilitator or
 *   token, a price above the caller's ceiling, a memo whose claims differ from the option's terms, or
 *   an offer that has expired.
 * - The authorization's nonce is `keccak256(utf8(memo))` (docs/protocol.md, "Signed payment"), so one
 *   offer can be paid at most once, whatever retries happen; its `validBefore` never outlasts the
 *   offer, so the facilitator cannot settle it after the gate stopped honouring the memo.
 *
 * The payer's one-time payment and its subscription methods come from the built-in schemes' client
 * parts, composed in clientSchemes.ts; this module holds what every payer has.
 */
import type { Address, Hex } from "viem";
import type { WriteClient } from "../chain/clientTypes.ts";
import { createFacilitatorClient, type FacilitatorClient, type FetchFn } from "../http/facilitatorClient.ts";
import { sameAddress } from "../protocol/address.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentRecord, SupportedResponse } from "../protocol/facilitator.ts";
import { chainIdOf, isNetwork, type Network } from "../protocol/network.ts";
import { createSchemeRegistry, type SchemeRegistry } from "../schemes/registry.ts";
import type { Scheme } from "../schemes/types.ts";
import { type BuiltinPayerMethods, builtinPayerParts, clientSchemes } from "./clientSchemes.ts";
import { fetchWithPayment } from "./fetchWithPayment.ts";
import { getPayment, paymentPath } from "./getPayment.ts";
import { parseUsdcCeiling } from "./parseUsdcCeiling.ts";
import { oneTimePayersOf } from "./payableOptions.ts";
import { payerReadHeaders } from "./payerReadHeaders.ts";
import type { PayerContext, PayerSigner, PaymentReceipt, PayOnce, PayOptions } from "./payerTypes.ts";
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

export type SubscribeOptions = Parameters<Payer["subscribe"]>[0];

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

/** A payer: its one-time payment, and what the built-in schemes add (`subscribe`, …; clientSchemes.ts). */
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
   * Reads one of this payer's payments back from the facilitator (`GET /payments/:nonce`, signed with
   * `X-Tollgate-Payer-Auth`): its status and, once settled, its proof. `nonce` is the EIP-3009 nonce,
   * keccak256 of the memo (`memoNonce(memo)`). The account needs `signMessage` (EIP-191).
   */
  payment(nonce: Hex): Promise<PaymentRecord>;
} & BuiltinPayerMethods;

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
  const { context, registry, fetch } = payerContextOf(options);
  const schemes = options.schemes ?? [];
  const oneTimePayers = oneTimePayersOf((scheme) => registry.client(scheme));
  const { payOnce, methods } = builtinPayerParts(context);
  const { account, network, facilitator, clock } = context;
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
      return payForRequest({ context, fetch, payOnce, schemes }, terms, maxAmount, signal);
    }
    const option = await paymentOptionOf(terms, { network, facilitator }, maxAmount, oneTimePayers);
    return payOnce(option, maxAmount, signal);
  }) as Payer["pay"];

  return {
    address: account.address,
    network,
    facilitator,
    account,
    ...methods,
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

/** Checks `createPayer`'s options once: what its parts are built with, and its schemes. */
function payerContextOf(options: CreatePayerOptions): {
  context: PayerContext;
  registry: SchemeRegistry;
  fetch: FetchFn;
} {
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
  const fetchFn = fetchFnOf(options);
  // Checked now, so a bad scheme fails at construction rather than at the first paid request.
  const registry = createSchemeRegistry(clientSchemes, options.schemes ?? []);
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
  const context: PayerContext = {
    account,
    network,
    chainId: chainIdOf(network),
    facilitator,
    clock: options.clock ?? systemClock,
    validForSeconds,
    walletClient: options.walletClient,
    tokenDomainOf: createTokenDomains(facilitator, network, options.tokens),
  };
  return { context, registry, fetch: fetchFn };
}

function fetchFnOf(options: CreatePayerOptions): FetchFn {
  if (options.fetch !== undefined && typeof options.fetch !== "function") {
    throw new TollgateError("InvalidRequest", "createPayer: fetch must be a function");
  }
  return options.fetch ?? globalThis.fetch;
}

/**
 * A token's EIP-712 domain: configured (`tokens`), else from the facilitator's `/supported`, cached
 * once it succeeds (a failure is forgotten, so the next payment asks again).
 */
function createTokenDomains(
  facilitator: FacilitatorClient,
  network: Network,
  tokens: CreatePayerOptions["tokens"],
): PayerContext["tokenDomainOf"] {
  const overrides = new Map(
    Object.entries(tokens ?? {}).map(([address, domain]) => [address.toLowerCase(), domain]),
  );
  let supported: Promise<SupportedResponse> | undefined;
  return async (token: Address) => {
    const override = overrides.get(token.toLowerCase());
    if (override !== undefined) return override;
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
}

/** `pay(url | request, { maxAmount })`: the request, its 402 paid once, and the paid retry. */
async function payForRequest(
  payer: { context: PayerContext; fetch: FetchFn; payOnce: PayOnce; schemes: readonly Scheme[] },
  target: Request | URL | string,
  ceiling: bigint,
  signal: AbortSignal | undefined,
): Promise<PaidResponse> {
  const { account, network, facilitator, clock } = payer.context;
  let receipt: PaymentReceipt | undefined;
  const paidFetch = fetchWithPayment(
    payer.fetch,
    // No subscriptions: `pay` pays once, whatever this payer holds for the origin.
    {
      address: account.address,
      network,
      facilitator,
      account,
      pay: (option, p) => payer.payOnce(option, parseUsdcCeiling(p.maxAmount), p.signal),
    },
    {
      maxPrice: ceiling,
      clock,
      schemes: payer.schemes,
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
