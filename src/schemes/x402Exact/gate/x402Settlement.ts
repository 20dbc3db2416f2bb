/**
 * The gate's acceptance of x402 v2 payments (docs/x402.md): a standard x402 client retries a 402
 * with `PAYMENT-SIGNATURE: base64(JSON(PaymentPayload))` carrying an `exact` EIP-3009 authorization.
 * As x402's own resource servers do, the gate **verifies** it through its facilitator's
 * `POST /x402/verify` before the handler runs, and **settles** it (`POST /x402/settle`) only once the
 * handler answered successfully (`finish(true)`); it then answers with `PAYMENT-RESPONSE`. A handler
 * that failed settles nothing: the payer is not charged and keeps an authorization it may send again.
 *
 * The gate trusts nothing of the client's copy of the terms: `accepted` must equal one of the route's
 * own x402 options (scheme, network, asset, amount, payTo), the authorization must pay that payee that
 * amount within the route's `maxTimeoutSeconds`, and the facilitator is sent the gate's own
 * requirements, never the client's.
 *
 * Replays. One transfer buys one response, whichever scheme presents it (docs/protocol.md, "Payment proof"). The EIP-3009
 * authorization of every settled payment is public on chain, so anyone can wrap it in a
 * `PAYMENT-SIGNATURE`; three rules stop that:
 * - the replay key is the authorization (`paymentReplayKey`: network, token, `from`, nonce), the same
 *   key a Tollgate proof of that transfer uses (its nonce is `keccak256(memo)`). The key is taken
 *   atomically (claimed, or consumed by a guard without claims) before the facilitator is asked and
 *   held while the handler runs, so of concurrent requests with one authorization — in one process or
 *   across instances sharing a guard, under either scheme — one goes on and the others are refused
 *   (or told it is in flight) without asking anyone;
 * - the facilitator answers `success` only to the x402 request that settled the authorization and to
 *   identical retries of it (docs/x402.md, "Replays"), and verifies no other. The requests carry the
 *   gate's own requirements with the gate's identity in `extra.tollgateGate` (`x402GateId`, derived
 *   from the memo secret, so every instance of one API sends the same request and another gate
 *   cannot): a payload settled at one gate, or an authorization settled as a Tollgate payment, is
 *   refused at every other gate even though its replay guard has never seen the key;
 * - the key is released whenever nothing was settled for this request: a refusal, a fault (the
 *   facilitator unreachable, a settlement still pending), or a handler that failed. The client retries
 *   **the same header** after a 5xx; paying again with a new payload would pay twice. When the verify
 *   says the authorization is used or expired, the gate asks the settle endpoint once: it answers a
 *   retry of a request whose settlement landed after its 5xx with the transaction (then the request is
 *   served as paid, `kind: "paid"`), and refuses anything else without moving money.
 *
 * What a crash costs. With a replay guard that has claims (every built-in one) the key is not consumed
 * but claimed for this payload with a lease, marked used once it settled: a gate that dies after
 * verifying and before settling leaves nothing settled and the claim to lapse, and the payer's
 * re-send of the same header is served then (503 `PaymentInFlight` before), at most three times. One
 * that dies after settling and before marking the claim used serves the same header once more after
 * the lease (the settle probe below), which costs the gate, never the payer. With a guard without
 * claims the key stays consumed: the payer is not charged, and signs a new payment.
 *
 * How long: a key is kept until `validBefore + RETRY_GRACE_SECONDS`, and the gate refuses a payload
 * after that instant before asking anyone, so a forgotten key can never be served again. The grace
 * lets a retry after a 5xx succeed even once the authorization has expired (the settle probe above).
 * A fresh authorization must leave `MIN_SETTLE_HEADROOM_SECONDS` for the handler and the settlement;
 * a handler slower than what is left is answered with a refused settlement (nothing charged).
 */
import { createHash, createHmac } from "node:crypto";
import type { Address, Hex } from "viem";
import { z } from "zod";
import { paymentReplayKey } from "../../../gate/paymentReplayKey.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { type Clock, unixSeconds } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import {
  decodeJsonHeader,
  encodeJsonHeader,
  HeaderName,
  safeDecodeJsonHeader,
} from "../../../protocol/header.ts";
import type { Network } from "../../../protocol/network.ts";
import {
  X402_GATE_EXTRA,
  X402_VERSION,
  X402ErrorReason,
  type X402ExactEip3009Payload,
  X402ExactEip3009PayloadSchema,
  type X402ExactRequirements,
  type X402PaymentPayload,
  X402PaymentPayloadSchema,
  type X402SettleRequest,
  type X402SettleResponse,
  X402SettleResponseSchema,
  type X402VerifyRequest,
  type X402VerifyResponse,
  X402VerifyResponseSchema,
} from "../../../protocol/x402.ts";
import type { ReplayGuard } from "../../../store/replayGuard.ts";
import type { ExactOffer } from "../../exact/gate.ts";

/** Built once, for the two headers decoded here before their own checks. */
const AnyJsonSchema = z.unknown();
const AnyObjectSchema = z.looseObject({});

/** An offer of a route as the gate prices it: one-time offers (`ExactOffer`) and any other scheme. */
type PricedOffer = ExactOffer | { scheme: string; amount: bigint };

/** A settled x402 payment the gate accepted for this request (`GatePayment` with `x402` set). */
export type X402GatePayment = {
  scheme: "exact";
  payer: Address;
  amount: bigint;
  payTo: Address;
  network: Network;
  token: Address;
  /**
   * Hash of the settling transaction; `undefined` while the handler runs (the payment is verified and
   * settles after it), set once it settled.
   */
  transaction: Hex | undefined;
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

/** Verifies one payment: `POST <facilitator>/x402/verify`. Throws for faults (unreachable, 5xx). */
export type X402Verify = (request: X402VerifyRequest) => Promise<X402VerifyResponse>;

/** What a route offers, as the gate's 402 advertised it. */
export type X402Terms = {
  /** The route's offers; only the `exact` (one-time) ones can be paid with x402. */
  offers: readonly PricedOffer[];
  /** The token's EIP-712 domain; `undefined` when the gate could not learn it (then nothing settles). */
  tokenEip712: { name: string; version: string } | undefined;
};

/**
 * `verified`: run the handler, then call `finish` once with whether it succeeded and answer as it
 * says (the payment's key stays consumed until then). `paid`: already settled for this very request (a
 * retry after a 5xx whose settlement landed): run the handler, add `headers`, and call `done` with
 * whether it answered below 500 (otherwise the key is given back, so the same header is served on a
 * retry, as a proof is). `in-flight`: the same header is held by a request still being served (or
 * whose gate died before settling); answer 503 `PaymentInFlight` after `retryAfterMs`. `refused`: answer a fresh
 * 402 with the x402 `reason` and a `message` for people; no money moved for this request and its key
 * is not held. `fault`: answer 5xx from `error`; the key was given back, and the same header may be
 * retried (unless giving it back is what failed).
 */
export type X402Outcome =
  | { kind: "verified"; payment: X402GatePayment; finish: (served: boolean) => Promise<X402Finish> }
  | {
      kind: "paid";
      payment: X402GatePayment;
      headers: Headers;
      done: (served: boolean) => Promise<void>;
    }
  | { kind: "in-flight"; retryAfterMs: number }
  | { kind: "refused"; reason: string; message: string }
  | { kind: "fault"; error: unknown };

/**
 * How a verified payment ended. `settled`: add `headers` (`PAYMENT-RESPONSE`) to the handler's answer.
 * `unsettled`: the handler failed, nothing was settled and the key is free again; add `headers`
 * (`PAYMENT-RESPONSE` with `success: false`, saying so) to its answer. `refused` and `fault`: the
 * settlement failed after the handler ran; the handler's answer must not be sent (a 402 with the
 * reason, or a 5xx), nothing was charged for it and the key is free again.
 */
export type X402Finish =
  | { kind: "settled"; headers: Headers }
  | { kind: "unsettled"; headers: Headers }
  | { kind: "refused"; reason: string; message: string }
  | { kind: "fault"; error: unknown };

export type X402Settlement = (header: string, terms: X402Terms) => Promise<X402Outcome>;

export type X402SettlementOptions = {
  verify: X402Verify;
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
  /**
   * How long a claim holds a payment in flight (ms) before the same header may take it over, when the
   * replay guard has claims; the gate's `proofLeaseSeconds` (default 60 s).
   */
  leaseMs?: number | undefined;
};

/** How long after `validBefore` a settled payment that was not served can still be collected. */
export const RETRY_GRACE_SECONDS = 600;
/** A claim's lease when none is given. */
const DEFAULT_LEASE_MS = 60_000;
/** Claims one payload may have: the first and two takeovers after a gate died before settling. */
const MAX_X402_CLAIMS = 3;
/** Tolerance for a payer clock running ahead, as the facilitator allows (docs/x402.md, check 8). */
const MAX_CLOCK_SKEW_SECONDS = 30;
/**
 * Seconds a fresh authorization must still be valid for when it arrives: the handler runs in them and
 * the settlement needs the facilitator's own 6 s after it. x402 clients sign for `maxTimeoutSeconds`
 * (300 s by default), so only an authorization held back most of that is refused.
 */
export const MIN_SETTLE_HEADROOM_SECONDS = 30;
/** `errorReason` of the `PAYMENT-RESPONSE` of a request whose handler failed (x402's cancel reason). */
export const NOT_SERVED_REASON = "handler_failed";
/** Verify refusals that an authorization settled by this very request would also get. */
const MAYBE_SETTLED_REASONS: ReadonlySet<string> = new Set([
  X402ErrorReason.NonceAlreadyUsed,
  X402ErrorReason.ValidBeforeExpired,
]);
/** What a settlement still in flight asks the client to wait before retrying the same header. */
const PENDING_RETRY_AFTER_SECONDS = 5;
const Hex32 = /^0x[0-9a-fA-F]{64}$/;

type VerifyResult =
  | { kind: "valid" }
  | { kind: "refused"; reason: string; message: string }
  | { kind: "fault"; error: unknown };

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
 * const acceptX402 = createX402Settlement({ verify: verifyThroughFacilitator(facilitator),
 *   settle: settleThroughFacilitator(facilitator), replayGuard,
 *   gateId: x402GateId(memoSecret), clock, payTo, network, token, maxTimeoutSeconds: 300 });
 * const outcome = await acceptX402(request.headers.get("PAYMENT-SIGNATURE")!, { offers, tokenEip712 });
 */
export function createX402Settlement(options: X402SettlementOptions): X402Settlement {
  return async function acceptX402(header, terms) {
    const checked = checkX402Payment(options, header, terms);
    if (checked.kind !== "checked") return checked;
    const { payload, requirements, authorization, validBefore, keepUntil, now } = checked;

    const key = paymentReplayKey({
      network: options.network,
      token: requirements.asset,
      payer: authorization.from,
      nonce: authorization.nonce,
    });
    // Bounded by the check above: at most maxTimeoutSeconds + skew + grace from now.
    const keepUntilMs = Number(keepUntil) * 1000;
    const taken = await takeKey(options, header, key, keepUntilMs);
    if (taken.kind !== "taken") return taken;
    const held = heldKey(options.replayGuard, key, taken.token, keepUntilMs);

    const gateRequirements = {
      ...requirements,
      extra: { ...requirements.extra, [X402_GATE_EXTRA]: options.gateId },
    };
    const request: X402SettleRequest = {
      x402Version: X402_VERSION,
      paymentPayload: payload,
      paymentRequirements: gateRequirements,
    };
    const ctx: AcceptContext = {
      options,
      payload,
      authorization,
      requirements,
      gateRequirements,
      request,
      held,
    };

    const verdict = await verifyResult(options.verify, request);
    if (verdict.kind !== "valid") return answerInvalid(ctx, verdict);
    if (validBefore < BigInt(now + MIN_SETTLE_HEADROOM_SECONDS)) {
      // Valid now, but the handler would run into the end of the window and the settlement be refused.
      return (
        (await held.release()) ??
        refusedOutcome(
          X402ErrorReason.ValidBeforeExpired,
          `the authorization must stay valid for at least ${MIN_SETTLE_HEADROOM_SECONDS} s to run the request and settle`,
        )
      );
    }
    return verifiedOutcome(ctx);
  };
}

type Refused = { kind: "refused"; reason: string; message: string };
type Fault = { kind: "fault"; error: unknown };
type Authorization = X402ExactEip3009Payload["authorization"];

const refusedOutcome = (reason: string, message: string): Refused => ({ kind: "refused", reason, message });

/** A payment that passed the checks made before anyone is asked, with what the next steps need. */
type CheckedPayment = {
  kind: "checked";
  payload: X402PaymentPayload;
  requirements: X402ExactRequirements;
  authorization: Authorization;
  validBefore: bigint;
  /** Until when its key is kept: `validBefore + RETRY_GRACE_SECONDS`. */
  keepUntil: bigint;
  now: number;
};

/**
 * The checks made before the key is taken and anyone asked: the header reads as a payload, the
 * token's domain is known, the payload accepted one of the route's own options, it is an EIP-3009
 * authorization paying that payee that amount, and its window is neither over nor too long.
 */
function checkX402Payment(
  options: X402SettlementOptions,
  header: string,
  terms: X402Terms,
): CheckedPayment | Refused | Fault {
  const read = readPayload(header);
  if (!read.ok) return refusedOutcome(read.reason, read.message);
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
  const requirements = acceptedRequirements(options, payload, terms.tokenEip712, terms.offers);
  if (requirements.kind === "refused") return requirements;
  const authorization = checkAuthorization(payload, requirements.requirements);
  if (authorization.kind === "refused") return authorization;
  return checkWindow(options, payload, requirements.requirements, authorization.authorization);
}

/** The route's own x402 option the payload accepted (scheme, network, asset, amount, payTo). */
function acceptedRequirements(
  options: X402SettlementOptions,
  payload: X402PaymentPayload,
  tokenEip712: { name: string; version: string },
  offers: readonly PricedOffer[],
): { kind: "found"; requirements: X402ExactRequirements } | Refused {
  const offered = x402Requirements({
    offers,
    payTo: options.payTo,
    network: options.network,
    token: options.token,
    tokenEip712,
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
    return refusedOutcome(
      accepted.scheme === "exact"
        ? X402ErrorReason.InvalidPaymentRequirements
        : X402ErrorReason.UnsupportedScheme,
      "the payment was made for terms this route does not offer (scheme, network, asset, amount, payTo)",
    );
  }
  return { kind: "found", requirements };
}

/** The payload's EIP-3009 authorization, paying the requirements' payee their amount. */
function checkAuthorization(
  payload: X402PaymentPayload,
  requirements: X402ExactRequirements,
): { kind: "authorization"; authorization: Authorization } | Refused {
  if ("permit2Authorization" in payload.payload) {
    return refusedOutcome(X402ErrorReason.UnsupportedPayloadType, "only EIP-3009 payloads are accepted");
  }
  const exact = X402ExactEip3009PayloadSchema.safeParse(payload.payload);
  if (!exact.success) {
    return refusedOutcome(
      X402ErrorReason.InvalidPayload,
      "payload must be { authorization: {from, to, value, validAfter, validBefore, nonce}, signature }",
    );
  }
  const { authorization } = exact.data;
  if (!sameAddress(authorization.to, requirements.payTo)) {
    return refusedOutcome(X402ErrorReason.RecipientMismatch, "the authorization pays another address");
  }
  if (authorization.value !== requirements.amount) {
    return refusedOutcome(
      X402ErrorReason.AuthorizationValueMismatch,
      `the authorization's value must be ${requirements.amount}`,
    );
  }
  return { kind: "authorization", authorization };
}

/** The authorization's window: not over (grace included), not longer than `maxTimeoutSeconds`. */
function checkWindow(
  options: X402SettlementOptions,
  payload: X402PaymentPayload,
  requirements: X402ExactRequirements,
  authorization: Authorization,
): CheckedPayment | Refused {
  const now = unixSeconds(options.clock);
  const validBefore = BigInt(authorization.validBefore);
  const keepUntil = validBefore + BigInt(RETRY_GRACE_SECONDS);
  if (keepUntil <= BigInt(now)) {
    return refusedOutcome(X402ErrorReason.ValidBeforeExpired, "the authorization has expired");
  }
  if (validBefore > BigInt(now + options.maxTimeoutSeconds + MAX_CLOCK_SKEW_SECONDS)) {
    return refusedOutcome(
      X402ErrorReason.ValidBeforeExpired,
      `the authorization stays valid longer than maxTimeoutSeconds (${options.maxTimeoutSeconds} s)`,
    );
  }
  return { kind: "checked", payload, requirements, authorization, validBefore, keepUntil, now };
}

/**
 * Takes the payment's key: claimed for this very payload when the guard has claims (every built-in
 * one), else consumed. `token` is the claim's token, `undefined` for a consumed key.
 */
async function takeKey(
  options: X402SettlementOptions,
  header: string,
  key: string,
  keepUntilMs: number,
): Promise<{ kind: "taken"; token: string | undefined } | X402Outcome> {
  const { replayGuard } = options;
  try {
    if (replayGuard.claim === undefined) {
      if (!(await replayGuard.consume(key, keepUntilMs))) {
        return refusedOutcome(X402ErrorReason.NonceAlreadyUsed, "this payment was already used");
      }
      return { kind: "taken", token: undefined };
    }
    // Held in flight for this very payload while it is verified, run and settled: a gate that dies
    // meanwhile does not use it up, and only the same header can take the lapsed claim over.
    const claimed = await replayGuard.claim(key, keepUntilMs, {
      request: `x402 ${createHash("sha256").update(header, "utf8").digest("hex")}`,
      leaseMs: options.leaseMs ?? DEFAULT_LEASE_MS,
      maxClaims: MAX_X402_CLAIMS,
    });
    if (!claimed.ok && claimed.reason === "in-flight") {
      return { kind: "in-flight", retryAfterMs: claimed.retryAfterMs };
    }
    if (!claimed.ok) return refusedOutcome(X402ErrorReason.NonceAlreadyUsed, "this payment was already used");
    return { kind: "taken", token: claimed.token };
  } catch (error) {
    return { kind: "fault", error };
  }
}

/** A payment's key held by this request: given back, or kept once the payment settled. */
type HeldKey = {
  /** Gives the key back: nothing was settled for this request. A failure leaves it used up (a fault). */
  release(): Promise<Fault | undefined>;
  /** Gives the key back and lets a failure reject (a `paid` request not served). */
  releaseOrThrow(): Promise<void>;
  /**
   * Marks a claimed key used for good once the payment settled. A failure leaves the claim to lapse:
   * the same header is then served once more after the lease, which costs the gate, never the payer.
   */
  keep(): Promise<void>;
};

function heldKey(
  replayGuard: ReplayGuard,
  key: string,
  token: string | undefined,
  keepUntilMs: number,
): HeldKey {
  return {
    async release() {
      try {
        await replayGuard.release(key, token);
        return undefined;
      } catch (error) {
        // The key stays used up (or its claim lapses); the gate logs this fault.
        return { kind: "fault", error };
      }
    },
    releaseOrThrow: () => replayGuard.release(key, token),
    async keep() {
      if (token === undefined) return;
      await replayGuard.settle?.(key, keepUntilMs).catch(() => undefined);
    },
  };
}

/** One payment past its checks, with its key held: what verifying, settling and answering need. */
type AcceptContext = {
  options: X402SettlementOptions;
  payload: X402PaymentPayload;
  authorization: Authorization;
  /** The route's own option the payload accepted. */
  requirements: X402ExactRequirements;
  /** The route's requirements with the gate's identity (`extra.tollgateGate`). */
  gateRequirements: X402ExactRequirements;
  /** What the facilitator is sent to verify and settle: the gate's own requirements. */
  request: X402SettleRequest;
  held: HeldKey;
};

function paymentWith(ctx: AcceptContext, transaction: Hex | undefined): X402GatePayment {
  const { options, authorization, payload, requirements, gateRequirements } = ctx;
  return {
    scheme: "exact",
    payer: authorization.from,
    amount: BigInt(requirements.amount),
    payTo: requirements.payTo,
    network: options.network,
    token: requirements.asset,
    transaction,
    x402: { nonce: authorization.nonce, payload, requirements: gateRequirements },
  };
}

function responseHeader(reply: X402SettleResponse): Headers {
  const headers = new Headers();
  headers.set(HeaderName.X402PaymentResponse, encodeJsonHeader(reply));
  return headers;
}

const settledReply = (ctx: AcceptContext, transaction: Hex): X402SettleResponse => ({
  success: true,
  transaction,
  network: ctx.options.network,
  payer: ctx.authorization.from,
});

/**
 * A verify that did not pass. Used or expired: possibly this very request, settled after its answer
 * was lost (a retry after a 5xx), so the settle endpoint is asked once; else the key goes back.
 */
async function answerInvalid(ctx: AcceptContext, checked: Refused | Fault): Promise<X402Outcome> {
  let answer: X402Outcome = checked;
  if (checked.kind === "refused" && MAYBE_SETTLED_REASONS.has(checked.reason)) {
    // The facilitator answers an identical settle request with its transaction and refuses any
    // other, moving no money: it settles nothing that is used or expired.
    const probe = await settleResult(ctx.options.settle, ctx.request, ctx.options.network);
    if (probe.kind === "settled") {
      return {
        kind: "paid",
        payment: paymentWith(ctx, probe.transaction),
        headers: responseHeader(settledReply(ctx, probe.transaction)),
        done: async (served) => {
          if (served) await ctx.held.keep();
          else await ctx.held.releaseOrThrow();
        },
      };
    }
    // A fault may hide a settlement in flight: answer 5xx, never a refusal that invites paying again.
    if (probe.kind === "fault") answer = probe;
  }
  return (await ctx.held.release()) ?? answer;
}

/** A verified payment: the handler runs, then `finish` settles it, or gives the key back. */
function verifiedOutcome(ctx: AcceptContext): X402Outcome {
  const { options, held } = ctx;
  const payment = paymentWith(ctx, undefined);
  return {
    kind: "verified",
    payment,
    async finish(served) {
      if (!served) {
        const failed = await held.release();
        if (failed !== undefined) return failed;
        return {
          kind: "unsettled",
          headers: responseHeader({
            success: false,
            errorReason: NOT_SERVED_REASON,
            errorMessage: "the request failed; no payment was taken, and the same payment may be sent again",
            transaction: "",
            network: options.network,
            payer: ctx.authorization.from,
          }),
        };
      }
      const result = await settleResult(options.settle, ctx.request, options.network);
      if (result.kind !== "settled") {
        // Nothing was settled for this request (or it is not known yet): the key goes back, so the
        // same header can be retried (a fault), and a refusal leaves the payer's authorization unused.
        return (await held.release()) ?? result;
      }
      payment.transaction = result.transaction;
      await held.keep();
      return { kind: "settled", headers: responseHeader(settledReply(ctx, result.transaction)) };
    },
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

/** `POST <facilitator>/x402/verify` through the gate's facilitator client (a simulation on chain). */
export function verifyThroughFacilitator(
  facilitator: Pick<FacilitatorClient, "request">,
  options: { timeoutMs?: number } = {},
): X402Verify {
  const timeoutMs = options.timeoutMs ?? 15_000;
  return (request) => {
    if (typeof facilitator.request !== "function") {
      return Promise.reject(
        new TollgateError("Internal", "the gate's facilitator client cannot post to /x402/verify"),
      );
    }
    return facilitator.request("POST", "/x402/verify", X402VerifyResponseSchema, {
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

/** The facilitator's answer as a verify result; never rejects. */
async function verifyResult(verify: X402Verify, request: X402VerifyRequest): Promise<VerifyResult> {
  let reply: X402VerifyResponse;
  try {
    reply = await verify(request);
  } catch (error) {
    return { kind: "fault", error };
  }
  if (reply.isValid) return { kind: "valid" };
  const reason = reply.invalidReason ?? X402ErrorReason.UnexpectedVerifyError;
  if (reason === X402ErrorReason.UnexpectedVerifyError || reason === X402ErrorReason.UnexpectedSettleError) {
    return {
      kind: "fault",
      error: new TollgateError(
        "ChainUnavailable",
        "the payment could not be verified now; retry the same request",
        {
          details: { reason },
          retryAfter: PENDING_RETRY_AFTER_SECONDS,
        },
      ),
    };
  }
  return { kind: "refused", reason, message: reply.invalidMessage ?? reason };
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
