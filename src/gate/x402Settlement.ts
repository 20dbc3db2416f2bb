/**
 * The gate's acceptance of x402 v2 payments (DESIGN.md §2.7): a standard x402 client retries a 402
 * with `PAYMENT-SIGNATURE: base64(JSON(PaymentPayload))` carrying an `exact` EIP-3009 authorization.
 * The gate settles it through its facilitator's `POST /x402/settle` **before** the handler runs and
 * answers with `PAYMENT-RESPONSE`.
 *
 * The gate trusts nothing of the client's copy of the terms: `accepted` must equal one of the route's
 * own x402 options (scheme, network, asset, amount, payTo), the authorization must pay that payee that
 * amount within the route's `maxTimeoutSeconds`, and the facilitator is sent the gate's own
 * requirements, never the client's.
 *
 * Replays. One transfer buys one response, whichever scheme presents it (DESIGN.md §2.4). The EIP-3009
 * authorization of every settled payment is public on chain, so anyone can wrap it in a
 * `PAYMENT-SIGNATURE`; three rules stop that:
 * - the replay key is the authorization (`paymentReplayKey`: network, token, `from`, nonce), the same
 *   key a Tollgate proof of that transfer uses (its nonce is `keccak256(memo)`). The order is
 *   *consume, then settle*: the key is consumed atomically before the facilitator is asked, so of
 *   concurrent requests with one authorization — in one process or across instances sharing a guard,
 *   under either scheme — one goes on and the others are refused without a settle;
 * - the facilitator answers `success` only to the x402 request that settled the authorization and to
 *   identical retries of it (docs/x402.md, "Replays"). The settle request carries the gate's own
 *   requirements with the gate's identity in `extra.tollgateGate` (`x402GateId`, derived from the memo
 *   secret, so every instance of one API sends the same request and another gate cannot): a payload
 *   settled at one gate, or an authorization settled as a Tollgate payment, is refused at every other
 *   gate even though its replay guard has never seen the key;
 * - the key is released whenever the facilitator did not answer `success` for this request: a refusal
 *   (nothing was settled for it) or a fault (facilitator unreachable, settlement still pending). The
 *   client retries **the same header** after a 5xx and is served then, whether or not the money had
 *   already moved; paying again with a new payload would pay twice. Releasing after a refusal also
 *   keeps a stranger who wraps someone's Tollgate payment in a `PAYMENT-SIGNATURE` from using up the
 *   key of that payment's proof.
 *
 * How long: a key is kept until `validBefore + RETRY_GRACE_SECONDS`, and the gate refuses a payload
 * after that instant before asking anyone, so a forgotten key can never be served again. The grace
 * lets a retry after a 5xx succeed even once the authorization has expired: the facilitator answers
 * the gate's identical request for a settled payload with its transaction, and refuses one that was
 * not settled in time.
 */
import { createHmac } from "node:crypto";
import type { Address, Hex } from "viem";
import { z } from "zod";
import type { FacilitatorClient } from "../client/facilitatorClient.ts";
import { sameAddress } from "../protocol/address.ts";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { decodeJsonHeader, encodeJsonHeader, HeaderName, safeDecodeJsonHeader } from "../protocol/header.ts";
import type { Network } from "../protocol/network.ts";
import {
  X402_GATE_EXTRA,
  X402_VERSION,
  X402ErrorReason,
  X402ExactEip3009PayloadSchema,
  type X402ExactRequirements,
  type X402PaymentPayload,
  X402PaymentPayloadSchema,
  type X402SettleRequest,
  type X402SettleResponse,
  X402SettleResponseSchema,
} from "../protocol/x402.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";
import type { OneTimeOffer } from "./composePaymentRequired.ts";
import { paymentReplayKey } from "./paymentReplayKey.ts";

/** Built once, for the two headers decoded here before their own checks. */
const AnyJsonSchema = z.unknown();
const AnyObjectSchema = z.looseObject({});

/** An offer of a route as the gate prices it: one-time offers (`OneTimeOffer`) and any other scheme. */
type PricedOffer = OneTimeOffer | { scheme: string; amount: bigint };

/** A settled x402 payment the gate accepted for this request (`GatePayment` with `x402` set). */
export type X402GatePayment = {
  scheme: "exact";
  payer: Address;
  amount: bigint;
  payTo: Address;
  network: Network;
  token: Address;
  /** Hash of the settling transaction. */
  transaction: Hex;
  x402: {
    /** The EIP-3009 nonce: the payment's key. */
    nonce: Hex;
    payload: X402PaymentPayload;
    /** The gate's own requirements the payment was settled against (with `extra.tollgateGate`). */
    requirements: X402ExactRequirements;
  };
};

/** Settles one payment: `POST <facilitator>/x402/settle`. Throws for faults (unreachable, 5xx). */
export type X402Settle = (request: X402SettleRequest) => Promise<X402SettleResponse>;

/** What a route offers, as the gate's 402 advertised it. */
export type X402Terms = {
  /** The route's offers; only the `exact` (one-time) ones can be paid with x402. */
  offers: readonly PricedOffer[];
  /** The token's EIP-712 domain; `undefined` when the gate could not learn it (then nothing settles). */
  tokenEip712: { name: string; version: string } | undefined;
};

/**
 * `paid`: run the handler and add `headers` (`PAYMENT-RESPONSE`). `refused`: answer a fresh 402 with
 * the x402 `reason` and a `message` for people; no money moved for this request and its key is not
 * held. `fault`: answer 5xx from `error`; the key was given back, and the same header may be retried
 * (unless giving it back is what failed).
 */
export type X402Outcome =
  | { kind: "paid"; payment: X402GatePayment; headers: Headers }
  | { kind: "refused"; reason: string; message: string }
  | { kind: "fault"; error: unknown };

export type X402Settlement = (header: string, terms: X402Terms) => Promise<X402Outcome>;

export type X402SettlementOptions = {
  settle: X402Settle;
  replayGuard: ReplayGuard;
  /** This gate's identity in the requirements it settles with (`x402GateId`). */
  gateId: string;
  clock: Clock;
  payTo: Address;
  network: Network;
  token: Address;
  /** The `maxTimeoutSeconds` of the gate's x402 options (its memo lifetime). */
  maxTimeoutSeconds: number;
};

/** How long after `validBefore` a settled payment that was not served can still be collected. */
export const RETRY_GRACE_SECONDS = 600;
/** Tolerance for a payer clock running ahead, as the facilitator allows (docs/x402.md, check 8). */
const MAX_CLOCK_SKEW_SECONDS = 30;
/** What a settlement still in flight asks the client to wait before retrying the same header. */
const PENDING_RETRY_AFTER_SECONDS = 5;
const Hex32 = /^0x[0-9a-fA-F]{64}$/;

type SettleResult =
  | { kind: "settled"; transaction: Hex }
  | { kind: "refused"; reason: string; message: string }
  | { kind: "fault"; error: unknown };

/**
 * The x402 requirements a gate offers for a route: one `exact` option per one-time offer, identical to
 * the `accepts` of its `PAYMENT-REQUIRED` header (`composePaymentRequired`).
 */
export function x402Requirements(params: {
  offers: readonly PricedOffer[];
  payTo: Address;
  network: Network;
  token: Address;
  tokenEip712: { name: string; version: string };
  maxTimeoutSeconds: number;
}): X402ExactRequirements[] {
  const exact = params.offers.filter((offer) => offer.scheme === "exact");
  return exact.map((offer) => ({
    scheme: "exact",
    network: params.network,
    amount: offer.amount.toString(),
    asset: params.token,
    payTo: params.payTo,
    maxTimeoutSeconds: params.maxTimeoutSeconds,
    extra: { name: params.tokenEip712.name, version: params.tokenEip712.version },
  }));
}

/**
 * A gate's identity towards its facilitator: 128 bits of HMAC-SHA256 of a fixed label under the memo
 * secret, hex. Instances of one API share the secret (they must, to accept each other's memos) and so
 * the identity; another gate's differs, and the secret cannot be learnt from it.
 */
export function x402GateId(memoSecret: Uint8Array): string {
  return createHmac("sha256", memoSecret)
    .update("tollgate x402 gate id v1", "utf8")
    .digest("hex")
    .slice(0, 32);
}

/**
 * Creates the gate's x402 acceptor. Never throws: every outcome, faults included, is data.
 *
 * @example
 * const acceptX402 = createX402Settlement({ settle: settleThroughFacilitator(facilitator), replayGuard,
 *   gateId: x402GateId(memoSecret), clock, payTo, network, token, maxTimeoutSeconds: 300 });
 * const outcome = await acceptX402(request.headers.get("PAYMENT-SIGNATURE")!, { offers, tokenEip712 });
 */
export function createX402Settlement(options: X402SettlementOptions): X402Settlement {
  const { settle, replayGuard, clock } = options;

  return async function acceptX402(header, terms) {
    const refused = (reason: string, message: string): X402Outcome => ({ kind: "refused", reason, message });

    const read = readPayload(header);
    if (!read.ok) return refused(read.reason, read.message);
    const payload = read.payload;
    if (terms.tokenEip712 === undefined) {
      return {
        kind: "fault",
        error: new TollgateError(
          "ChainUnavailable",
          "the token's EIP-712 domain is unknown to this gate, so x402 payments cannot be settled now",
          { retryAfter: 30 },
        ),
      };
    }
    const offered = x402Requirements({
      offers: terms.offers,
      payTo: options.payTo,
      network: options.network,
      token: options.token,
      tokenEip712: terms.tokenEip712,
      maxTimeoutSeconds: options.maxTimeoutSeconds,
    });
    const accepted = payload.accepted;
    const requirements = offered.find(
      (offer) =>
        accepted.scheme === offer.scheme &&
        accepted.network === offer.network &&
        sameAddress(accepted.asset, offer.asset) &&
        accepted.amount === offer.amount &&
        sameAddress(accepted.payTo, offer.payTo),
    );
    if (requirements === undefined) {
      return refused(
        accepted.scheme === "exact"
          ? X402ErrorReason.InvalidPaymentRequirements
          : X402ErrorReason.UnsupportedScheme,
        "the payment was made for terms this route does not offer (scheme, network, asset, amount, payTo)",
      );
    }
    if ("permit2Authorization" in payload.payload) {
      return refused(X402ErrorReason.UnsupportedPayloadType, "only EIP-3009 payloads are accepted");
    }
    const exact = X402ExactEip3009PayloadSchema.safeParse(payload.payload);
    if (!exact.success) {
      return refused(
        X402ErrorReason.InvalidPayload,
        "payload must be { authorization: {from, to, value, validAfter, validBefore, nonce}, signature }",
      );
    }
    const { authorization } = exact.data;
    if (!sameAddress(authorization.to, requirements.payTo)) {
      return refused(X402ErrorReason.RecipientMismatch, "the authorization pays another address");
    }
    if (authorization.value !== requirements.amount) {
      return refused(
        X402ErrorReason.AuthorizationValueMismatch,
        `the authorization's value must be ${requirements.amount}`,
      );
    }
    const now = unixSeconds(clock);
    const validBefore = BigInt(authorization.validBefore);
    const keepUntil = validBefore + BigInt(RETRY_GRACE_SECONDS);
    if (keepUntil <= BigInt(now)) {
      return refused(X402ErrorReason.ValidBeforeExpired, "the authorization has expired");
    }
    if (validBefore > BigInt(now + options.maxTimeoutSeconds + MAX_CLOCK_SKEW_SECONDS)) {
      return refused(
        X402ErrorReason.ValidBeforeExpired,
        `the authorization stays valid longer than maxTimeoutSeconds (${options.maxTimeoutSeconds} s)`,
      );
    }

    const key = paymentReplayKey({
      network: options.network,
      token: requirements.asset,
      payer: authorization.from,
      nonce: authorization.nonce,
    });
    try {
      // Bounded by the check above: at most maxTimeoutSeconds + skew + grace from now.
      if (!(await replayGuard.consume(key, Number(keepUntil) * 1000))) {
        return refused(X402ErrorReason.NonceAlreadyUsed, "this payment was already used");
      }
    } catch (error) {
      return { kind: "fault", error };
    }

    const settled = { ...requirements, extra: { ...requirements.extra, [X402_GATE_EXTRA]: options.gateId } };
    const result = await settleResult(
      settle,
      { x402Version: X402_VERSION, paymentPayload: payload, paymentRequirements: settled },
      options.network,
    );
    if (result.kind !== "settled") {
      // Nothing was settled for this request (or it is not known yet): the key goes back, so the same
      // header can be retried, and a refused stranger's payload does not use up a payer's proof.
      try {
        await replayGuard.release(key);
      } catch (error) {
        // The key stays used up; the gate logs this fault, and the header is refused from now on.
        return { kind: "fault", error };
      }
      return result;
    }

    const payment: X402GatePayment = {
      scheme: "exact",
      payer: authorization.from,
      amount: BigInt(requirements.amount),
      payTo: requirements.payTo,
      network: options.network,
      token: requirements.asset,
      transaction: result.transaction,
      x402: { nonce: authorization.nonce, payload, requirements: settled },
    };
    const headers = new Headers();
    headers.set(
      HeaderName.X402PaymentResponse,
      encodeJsonHeader({
        success: true,
        transaction: result.transaction,
        network: options.network,
        payer: authorization.from,
      }),
    );
    return { kind: "paid", payment, headers };
  };
}

/**
 * `POST <facilitator>/x402/settle` through the gate's facilitator client. The wait is longer than the
 * facilitator's own settlement wait, so that a slow chain is reported by the facilitator
 * (`settlement_pending`) rather than by a client timeout; either way the gate answers 503.
 */
export function settleThroughFacilitator(
  facilitator: Pick<FacilitatorClient, "request">,
  options: { timeoutMs?: number } = {},
): X402Settle {
  const timeoutMs = options.timeoutMs ?? 40_000;
  return (request) => {
    if (typeof facilitator.request !== "function") {
      return Promise.reject(
        new TollgateError("Internal", "the gate's facilitator client cannot post to /x402/settle"),
      );
    }
    return facilitator.request("POST", "/x402/settle", X402SettleResponseSchema, {
      body: request,
      timeoutMs,
    });
  };
}

/**
 * Puts the x402 reason of a refusal into the `error` of a 402's `PAYMENT-REQUIRED`, where x402 clients
 * look for it (x402 resource servers answer a failed payment the same way). Returns `response`.
 */
export function withX402Reason(response: Response, reason: string): Response {
  const header = response.headers.get(HeaderName.X402PaymentRequired);
  if (header === null) return response;
  try {
    const paymentRequired = decodeJsonHeader(header, AnyObjectSchema);
    response.headers.set(
      HeaderName.X402PaymentRequired,
      encodeJsonHeader({ ...paymentRequired, error: reason }),
    );
  } catch {
    // The header the gate just built always decodes; if it somehow did not, it is left as it was.
  }
  return response;
}

type ReadPayload = { ok: true; payload: X402PaymentPayload } | { ok: false; reason: string; message: string };

/** `PAYMENT-SIGNATURE` → payload: at most 8 KiB, strict base64, UTF-8 JSON, x402 v2's schema. */
function readPayload(header: string): ReadPayload {
  const json = safeDecodeJsonHeader(header, AnyJsonSchema);
  if (!json.ok) {
    return {
      ok: false,
      reason: X402ErrorReason.InvalidPayload,
      message: `PAYMENT-SIGNATURE is not base64 of JSON (${json.error.message})`,
    };
  }
  const value = json.value;
  if (
    typeof value === "object" &&
    value !== null &&
    "x402Version" in value &&
    value.x402Version !== X402_VERSION
  ) {
    return {
      ok: false,
      reason: X402ErrorReason.InvalidX402Version,
      message: `this gate accepts x402 version ${X402_VERSION} payments`,
    };
  }
  const parsed = X402PaymentPayloadSchema.safeParse(value);
  if (!parsed.success) {
    return {
      ok: false,
      reason: X402ErrorReason.InvalidPayload,
      message: "PAYMENT-SIGNATURE is not an x402 v2 payment payload",
    };
  }
  return { ok: true, payload: parsed.data };
}

/** The facilitator's answer as a settle result; never rejects. */
async function settleResult(
  settle: X402Settle,
  request: X402SettleRequest,
  network: Network,
): Promise<SettleResult> {
  let reply: X402SettleResponse;
  try {
    reply = await settle(request);
  } catch (error) {
    return { kind: "fault", error };
  }
  if (reply.success) {
    if (!Hex32.test(reply.transaction) || reply.network !== network) {
      return {
        kind: "fault",
        error: new TollgateError("Internal", "the facilitator reported a settlement for other terms", {
          details: { reason: "facilitator_bad_reply", network: reply.network },
        }),
      };
    }
    return { kind: "settled", transaction: reply.transaction.toLowerCase() as Hex };
  }
  const reason = reply.errorReason ?? X402ErrorReason.UnexpectedSettleError;
  if (
    reason === X402ErrorReason.SettlementPending ||
    reason === X402ErrorReason.UnexpectedSettleError ||
    reason === X402ErrorReason.UnexpectedVerifyError
  ) {
    // The money may be moving: not a refusal. The same header, retried, is answered by the same settle.
    return {
      kind: "fault",
      error: new TollgateError("ChainUnavailable", "the payment is still settling; retry the same request", {
        details: { reason },
        retryAfter: PENDING_RETRY_AFTER_SECONDS,
      }),
    };
  }
  return { kind: "refused", reason, message: reply.errorMessage ?? reason };
}
