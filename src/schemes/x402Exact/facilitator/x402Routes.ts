/**
 * The facilitator's x402 v2 endpoints (docs/x402.md): `POST /verify`, `POST /settle` and
 * `GET /supported` with the bodies of the x402 v2 facilitator API, mounted under `/x402`, so that a
 * standard x402 resource server (e.g. `@x402/express` with `HTTPFacilitatorClient`) can use a
 * Tollgate facilitator for the `exact` EVM scheme with EIP-3009 payloads.
 *
 * They sit on the settlement engine: verify is `engine.preflight` (every check short of settling,
 * ending in a simulation on chain) and settle is `engine.settleAuthorization` (the batched, crash-safe
 * path, idempotent on the authorization nonce), so an x402 payment is checked and settled exactly like
 * a Tollgate one.
 *
 * One transfer is answered as settled to one x402 request. An EIP-3009 authorization is public once
 * settled, so anyone can wrap it in a new x402 request; `/settle` therefore answers success only to the
 * request that owns the authorization (`x402RequestRecords.ts`): the first request, identified by the
 * hash of its whole body, that passed the preflight and claimed it. Identical retries of that request
 * from a Tollgate gate get its answer again (the gate keeps its own replay guard); a standard x402
 * resource server's request is answered `success` once. Any other request, and any request for an
 * authorization that a Tollgate payment (`/authorize`) or someone on chain used, gets
 * `invalid_exact_evm_nonce_already_used`. `/verify` refuses the same authorizations, and claims the
 * authorization for a Tollgate gate's request (`extra.tollgateGate`) that it finds valid, since such a
 * gate runs its handler between verify and settle.
 *
 * Outcomes, as x402 facilitators report them:
 * - a payment that fails a check is 200 with `isValid: false` / `success: false` and a reason
 *   string (x402's own where it has one; mapping in docs/x402.md);
 * - a request that is not an x402 verify/settle body at all is 400 with Tollgate's error body;
 * - the chain being unreachable is 503 with `Retry-After` and an x402 body carrying
 *   `unexpected_*_error` (plus Tollgate's `error` object).
 */
import { type Context, Hono } from "hono";
import type { Logger } from "pino";
import { z } from "zod";
import { BatchRowSchema, type PaymentRow } from "../../../facilitator/paymentRecords.ts";
import type { SettlementEngine } from "../../../facilitator/settlementEngine.ts";
import { errorResponse, readJsonBody } from "../../../http/httpErrors.ts";
import { routeDoc } from "../../../http/routeDocs.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { type Clock, unixSeconds } from "../../../protocol/clock.ts";
import { type ErrorCode, TollgateError } from "../../../protocol/errors.ts";
import type { SupportedResponse } from "../../../protocol/facilitator.ts";
import { parseWire } from "../../../protocol/parseWire.ts";
import {
  X402_GATE_EXTRA,
  X402_VERSION,
  X402ErrorReason,
  X402SettleRequestSchema,
  type X402SettleResponse,
  X402SettleResponseSchema,
  type X402SupportedResponse,
  X402SupportedResponseSchema,
  type X402VerifyRequest,
  X402VerifyRequestSchema,
  type X402VerifyResponse,
  X402VerifyResponseSchema,
} from "../../../protocol/x402.ts";
import { queryOneParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";
import {
  type Checked,
  checkPayment,
  checkWindow,
  type Refusal,
  type TokenDomain,
} from "./x402PaymentChecks.ts";
import {
  claimX402Request,
  findX402Request,
  markX402Answered,
  x402RequestHash,
} from "./x402RequestRecords.ts";

export type X402RoutesDeps = {
  engine: Pick<SettlementEngine, "preflight" | "settleAuthorization" | "getPayment">;
  /** Tollgate's own `/supported`: the networks, tokens (with EIP-712 domains) and signers served. */
  supported: SupportedResponse;
  /**
   * Read for the batch transaction of a payment still settling (`settlement_pending`); holds which
   * request owns each x402 payment (`x402_settle_requests`).
   */
  store: Queryable;
  clock: Clock;
  logger?: Logger | undefined;
};

/** Just enough shape to tell an x402 body of another version from a malformed one. */
const EnvelopeSchema = z.looseObject({
  x402Version: z.number(),
  paymentPayload: z.looseObject({ x402Version: z.number() }),
  paymentRequirements: z.looseObject({}),
});

/** The x402 routes, documented for the OpenAPI document (routeDocs.ts). */
const docs = {
  supported: routeDoc({
    summary: "x402 v2: the scheme and network kinds settled here",
    response: X402SupportedResponseSchema,
  }),
  verify: routeDoc({
    summary: "x402 v2: check an `exact` EVM payment payload against its requirements without settling",
    request: X402VerifyRequestSchema,
    response: X402VerifyResponseSchema,
    errors: [400, 413, 503],
  }),
  settle: routeDoc({
    summary: "x402 v2: settle an `exact` EVM payment payload on chain (idempotent on the nonce)",
    request: X402SettleRequestSchema,
    response: X402SettleResponseSchema,
    errors: [400, 413, 503],
  }),
};

/**
 * The x402 sub-app; mount it with `app.route("/x402", x402Routes(deps))`.
 *
 * @example
 * app.route("/x402", x402Routes({ engine, supported, store, clock }));
 * // an x402 resource server then uses new HTTPFacilitatorClient({ url: `${facilitatorUrl}/x402` })
 */
export function x402Routes(deps: X402RoutesDeps): Hono {
  const app = new Hono();
  const supportedReply = x402Supported(deps.supported);
  const ctx: X402RoutesContext = {
    deps,
    // network → lowercase token address → EIP-712 domain, for the networks this facilitator settles.
    tokensByNetwork: new Map(
      deps.supported.networks.map((n) => [
        n.network as string,
        new Map<string, TokenDomain>(n.tokens.map((t) => [t.address.toLowerCase(), t.eip712])),
      ]),
    ),
  };

  app.get("/supported", docs.supported, (c) => c.json(supportedReply));
  app.post("/verify", docs.verify, (c) => verifyX402(ctx, c));
  app.post("/settle", docs.settle, (c) => settleX402(ctx, c));
  return app;
}

/** What the routes' steps share: the deps and the tokens settled per network. */
type X402RoutesContext = {
  deps: X402RoutesDeps;
  /** network → lowercase token address → EIP-712 domain, for the networks this facilitator settles. */
  tokensByNetwork: ReadonlyMap<string, ReadonlyMap<string, TokenDomain>>;
};

/** `POST /verify`: the checks, the owner of the authorization, the window, then the preflight. */
async function verifyX402(ctx: X402RoutesContext, c: Context): Promise<Response> {
  const { engine, clock } = ctx.deps;
  const read = await readX402Request(c);
  if (!read.ok) return c.json(verifyRefusal(read.refusal));
  const checked = checkPayment(read.request, ctx.tokensByNetwork);
  if ("reason" in checked) return c.json(verifyRefusal(checked));
  const requestHash = x402RequestHash(read.request);
  const previous = await engine.getPayment(checked.payment.authorization.nonce);
  const taken = await takenFrom(ctx, checked, requestHash, previous);
  if (taken !== undefined) return c.json(verifyRefusal(taken));
  const late = checkWindow(checked, unixSeconds(clock));
  if (late !== undefined) return c.json(verifyRefusal(late));
  try {
    const payer = await engine.preflight(checked.payment);
    // A Tollgate gate verifies, runs the handler, then settles: the authorization is claimed for its
    // request now, so that another gate shown the same payload at the same time is refused here
    // instead of running its handler for a payment it could never settle. Claimed only after the
    // signature and a simulation passed, as at settle.
    if (
      typeof read.request.paymentRequirements.extra?.[X402_GATE_EXTRA] === "string" &&
      (await claimX402Request(ctx.deps.store, checked.payment.authorization.nonce, requestHash)) !==
        requestHash
    ) {
      return c.json(verifyRefusal(ownedElsewhere(checked.payer)));
    }
    const reply: X402VerifyResponse = { isValid: true, payer };
    return c.json(reply);
  } catch (error) {
    if (!(error instanceof TollgateError)) throw error;
    if (error.code === "ChainUnavailable") {
      return faultReply(ctx, error, verifyRefusal(unexpected(error, "verify", checked.payer)));
    }
    return c.json(verifyRefusal(refusalOf(error, "verify", checked.payer)));
  }
}

/** One `POST /settle` past its checks and the owner's check: what settling and answering need. */
type SettleRequest = {
  ctx: X402RoutesContext;
  c: Context;
  request: X402VerifyRequest;
  network: string;
  checked: Checked;
  nonce: string;
  requestHash: string;
  previous: PaymentRow | undefined;
};

/** `POST /settle`: the checks, the owner of the authorization, a settled retry, the window, then settling. */
async function settleX402(ctx: X402RoutesContext, c: Context): Promise<Response> {
  const read = await readX402Request(c);
  if (!read.ok) return c.json(settleRefusal(read.refusal, ""));
  const network = read.request.paymentRequirements.network;
  const checked = checkPayment(read.request, ctx.tokensByNetwork);
  if ("reason" in checked) return c.json(settleRefusal(checked, network));

  const nonce = checked.payment.authorization.nonce;
  const requestHash = x402RequestHash(read.request);
  const previous = await ctx.deps.engine.getPayment(nonce);
  const taken = await takenFrom(ctx, checked, requestHash, previous);
  if (taken !== undefined) return c.json(settleRefusal(taken, network));
  const s: SettleRequest = { ctx, c, request: read.request, network, checked, nonce, requestHash, previous };

  // Idempotence: this request settled before answers with its transaction even after its validity
  // window has closed (the window only matters for a transfer still to make).
  if (previous?.status === "settled" && previous.tx_hash !== null) return answerSettled(s, previous.tx_hash);

  const late = checkWindow(checked, unixSeconds(ctx.deps.clock));
  if (late !== undefined) return c.json(settleRefusal(late, network));
  try {
    if (previous === undefined) {
      const refused = await claimForSettle(s);
      if (refused !== undefined) return refused;
    }
    const row = await ctx.deps.engine.settleAuthorization(checked.payment);
    if (row.tx_hash === null) throw new TollgateError("Internal", "a settled payment has no transaction");
    return answerSettled(s, row.tx_hash);
  } catch (error) {
    return settleFailed(s, error);
  }
}

/**
 * Claims the authorization for this request, once the payer's signature and a simulation passed, so
 * that junk requests record nothing; the claim decides between different requests racing for one
 * authorization. Returns the refusal when another request owns it.
 */
async function claimForSettle(s: SettleRequest): Promise<Response | undefined> {
  const { ctx, c, checked, nonce, requestHash, network } = s;
  try {
    await ctx.deps.engine.preflight(checked.payment, { forSettle: true });
  } catch (error) {
    // Another instance may have claimed and settled this very request between the read above
    // and this simulation: the chain then reports the nonce used, and the claim names this
    // request. It is answered as a retry; any other owner, or none (a third party), is refused.
    if (!(error instanceof TollgateError) || error.code !== "NonceAlreadyUsed") throw error;
    const owner = await findX402Request(ctx.deps.store, nonce);
    if (owner === undefined) throw error;
    if (owner !== requestHash) return c.json(settleRefusal(ownedElsewhere(checked.payer), network));
  }
  if ((await claimX402Request(ctx.deps.store, nonce, requestHash)) !== requestHash) {
    return c.json(settleRefusal(ownedElsewhere(checked.payer), network));
  }
  return undefined;
}

/**
 * `success` to the owner. A Tollgate gate names itself in `extra.tollgateGate` and consumes the
 * payment in its own replay guard before settling, so it may ask again after a lost reply. A
 * standard x402 resource server keeps no replay guard (its `upfront` flow settles without a
 * verify), so its request is answered `success` once; a replay of the same request is refused,
 * while a retry after `settlement_pending` or a fault still gets the answer.
 */
async function answerSettled(s: SettleRequest, transaction: string): Promise<Response> {
  const { c, network, checked } = s;
  const fromGate = typeof s.request.paymentRequirements.extra?.[X402_GATE_EXTRA] === "string";
  if (!fromGate && !(await markX402Answered(s.ctx.deps.store, s.nonce, s.requestHash))) {
    return c.json(
      settleRefusal(
        {
          reason: X402ErrorReason.NonceAlreadyUsed,
          message: "this payment was already answered as settled to this request; it pays for one response",
          payer: checked.payer,
        },
        network,
      ),
    );
  }
  return c.json(settleSuccess(transaction, network, checked.payer));
}

/** A settlement that threw: still pending, the chain unreachable, or a refusal of the engine. */
async function settleFailed(s: SettleRequest, error: unknown): Promise<Response> {
  const { ctx, c, checked, network } = s;
  if (!(error instanceof TollgateError)) throw error;
  if (error.code === "ChainUnavailable") {
    if (typeof error.details?.status === "string") {
      // Queued or broadcast but not confirmed within the engine's wait: it carries on. With a
      // transaction to name, x402's resource server retries the settle once (same payload).
      const pending: X402SettleResponse = {
        success: false,
        errorReason: X402ErrorReason.SettlementPending,
        errorMessage: error.message,
        transaction: await transactionOf(ctx, checked.payment.authorization.nonce),
        network,
        payer: checked.payer,
      };
      return c.json(pending);
    }
    return faultReply(ctx, error, settleRefusal(unexpected(error, "settle", checked.payer), network));
  }
  return c.json(settleRefusal(refusalOf(error, "settle", checked.payer), network));
}

/**
 * Why this request may not use the authorization, if it may not: a Tollgate payment (`/authorize`)
 * holds its nonce, another authorization does, or another x402 request owns it. An x402 payment whose
 * owner is unknown (settled before owners were recorded) belongs to no request.
 */
async function takenFrom(
  ctx: X402RoutesContext,
  checked: Checked,
  requestHash: string,
  previous: PaymentRow | undefined,
): Promise<Refusal | undefined> {
  if (previous !== undefined && previous.source !== "x402") {
    return {
      reason: X402ErrorReason.NonceAlreadyUsed,
      message: "this authorization was used for a Tollgate payment; it cannot pay for an x402 request",
      payer: checked.payer,
    };
  }
  if (previous !== undefined && !sameAuthorization(previous, checked)) {
    return {
      reason: X402ErrorReason.NonceAlreadyUsed,
      message: "another payment already used this authorization nonce",
      payer: checked.payer,
    };
  }
  const owner = await findX402Request(ctx.deps.store, checked.payment.authorization.nonce);
  if (owner === undefined ? previous !== undefined : owner !== requestHash) {
    return ownedElsewhere(checked.payer);
  }
  return undefined;
}

/** The batch transaction a not-yet-settled payment rides in, or "" when none was signed yet. */
async function transactionOf(ctx: X402RoutesContext, nonce: string): Promise<string> {
  const row = await ctx.deps.engine.getPayment(nonce);
  if (row === undefined) return "";
  if (row.tx_hash !== null) return row.tx_hash;
  if (row.batch_id === null) return "";
  const batch = await queryOneParsed(
    ctx.deps.store,
    BatchRowSchema,
    "SELECT * FROM settlement_batches WHERE id = $1",
    [row.batch_id],
  );
  return batch?.tx_hash ?? "";
}

function faultReply(
  ctx: X402RoutesContext,
  error: TollgateError,
  body: X402VerifyResponse | X402SettleResponse,
): Response {
  ctx.deps.logger?.warn({ code: error.code }, "x402 request could not reach the chain");
  const reply = errorResponse(error);
  return new Response(JSON.stringify({ ...body, ...error.toBody() }), {
    status: reply.status,
    headers: reply.headers,
  });
}

/** The x402 `GET /supported` reply for what this facilitator settles: `exact`, x402 v2, per network. */
export function x402Supported(supported: SupportedResponse): X402SupportedResponse {
  const exact = supported.schemes.includes("exact");
  const networks = supported.networks.filter((n) => exact && n.tokens.length > 0);
  const signers = [...new Set(networks.flatMap((n) => n.signers ?? []))];
  return {
    kinds: networks.map((n) => ({ x402Version: X402_VERSION, scheme: "exact", network: n.network })),
    extensions: [],
    // x402 keys signers by CAIP family; every network here is an EVM one.
    signers: signers.length === 0 ? {} : { "eip155:*": signers },
  };
}

/**
 * Reads a verify/settle body. Anything that is not such a body is a 400 (thrown); an x402 body of
 * another protocol version is a refusal, since it is well-formed for what it claims to be.
 */
async function readX402Request(
  c: Context,
): Promise<{ ok: true; request: X402VerifyRequest } | { ok: false; refusal: Refusal }> {
  const envelope = await readJsonBody(c, EnvelopeSchema);
  if (envelope.x402Version !== X402_VERSION || envelope.paymentPayload.x402Version !== X402_VERSION) {
    return {
      ok: false,
      refusal: {
        reason: X402ErrorReason.InvalidX402Version,
        message: `this facilitator speaks x402 version ${X402_VERSION}`,
      },
    };
  }
  return { ok: true, request: parseWire(X402VerifyRequestSchema, envelope, { what: "x402 request body" }) };
}

/** The x402 reason for a refusal the settlement engine threw. */
function refusalOf(error: TollgateError, phase: "verify" | "settle", payer: string): Refusal {
  const reason = reasonByCode[error.code];
  if (error.code === "AuthorizationExpired") {
    const notYet = error.details !== undefined && "validAfter" in error.details;
    return {
      reason: notYet ? X402ErrorReason.ValidAfterInFuture : X402ErrorReason.ValidBeforeExpired,
      message: error.message,
      payer,
    };
  }
  if (error.code === "InvalidRequest" || error.code === "AccountBlacklisted") {
    // What reaches here is a revert the engine could not name, or a blacklisted payer or payee (x402 has
    // no reason for it; the message names the account): in a simulation at verify time, or of the
    // settlement itself.
    return {
      reason: phase === "verify" ? X402ErrorReason.SimulationFailed : X402ErrorReason.TransactionFailed,
      message: error.message,
      payer,
    };
  }
  if (reason !== undefined) return { reason, message: error.message, payer };
  return unexpected(error, phase, payer);
}

const reasonByCode: Partial<Record<ErrorCode, X402ErrorReason>> = {
  InvalidSignature: X402ErrorReason.InvalidSignature,
  InsufficientFunds: X402ErrorReason.InsufficientBalance,
  NonceAlreadyUsed: X402ErrorReason.NonceAlreadyUsed,
  AmountMismatch: X402ErrorReason.AuthorizationValueMismatch,
  UnsupportedNetwork: X402ErrorReason.InvalidNetwork,
  UnsupportedToken: X402ErrorReason.InvalidPaymentRequirements,
};

function unexpected(error: TollgateError, phase: "verify" | "settle", payer: string): Refusal {
  return {
    reason:
      phase === "verify" ? X402ErrorReason.UnexpectedVerifyError : X402ErrorReason.UnexpectedSettleError,
    message: error.message,
    payer,
  };
}

function ownedElsewhere(payer: string): Refusal {
  return {
    reason: X402ErrorReason.NonceAlreadyUsed,
    message: "this authorization was settled for another x402 request; a payment pays for one request",
    payer,
  };
}

function verifyRefusal(refusal: Refusal): X402VerifyResponse {
  return {
    isValid: false,
    invalidReason: refusal.reason,
    invalidMessage: refusal.message,
    ...(refusal.payer === undefined ? {} : { payer: refusal.payer }),
  };
}

function settleRefusal(refusal: Refusal, network: string): X402SettleResponse {
  return {
    success: false,
    errorReason: refusal.reason,
    errorMessage: refusal.message,
    transaction: "",
    network,
    ...(refusal.payer === undefined ? {} : { payer: refusal.payer }),
  };
}

function settleSuccess(transaction: string, network: string, payer: string): X402SettleResponse {
  return { success: true, transaction, network, payer };
}

/** The same signed transfer: what the token would execute is identical (a memo, if any, aside). */
function sameAuthorization(row: PaymentRow, checked: Checked): boolean {
  const { authorization: a, signature, token } = checked.payment;
  return (
    sameAddress(row.payer, a.from) &&
    sameAddress(row.pay_to, a.to) &&
    sameAddress(row.token, token) &&
    row.amount === BigInt(a.value) &&
    row.valid_after === BigInt(a.validAfter) &&
    row.valid_before === BigInt(a.validBefore) &&
    row.signature === signature.toLowerCase()
  );
}
