/**
 * The checks of an x402 payment that need no chain (x402Routes.ts): the payment against its
 * requirements and what this facilitator settles (`checkPayment`), then its validity window against
 * the clock (`checkWindow`). A failed check is a refusal with its x402 reason.
 */
import type { CheckablePayment } from "../../../facilitator/checkSignedPayment.ts";
import { sameAddress } from "../../../protocol/address.ts";
import {
  X402ErrorReason,
  X402ExactEip3009PayloadSchema,
  type X402PaymentRequirements,
  type X402VerifyRequest,
} from "../../../protocol/x402.ts";

export type Refusal = { reason: X402ErrorReason; message: string; payer?: string | undefined };
export type TokenDomain = { name: string; version: string };
export type Checked = { payment: CheckablePayment; payer: string; maxTimeoutSeconds: number };

/**
 * Seconds an authorization must still be valid for when it arrives: the settlement engine refuses
 * less, so that nothing expires while it waits in a batch (x402's facilitator uses the same 6).
 */
const MIN_REMAINING_SECONDS = 6;
/**
 * Tolerance for a payer's clock running ahead of ours when comparing `validBefore` with
 * `now + maxTimeoutSeconds` (x402 clients sign `validBefore = their now + maxTimeoutSeconds`).
 */
const MAX_CLOCK_SKEW_SECONDS = 30;
/** 65 bytes as hex: `r ‖ s ‖ v` of an externally owned account, the only signature Tollgate settles. */
const ECDSA_SIGNATURE_HEX_LENGTH = 2 + 65 * 2;

/**
 * Every check of the payment against its requirements that needs neither the clock nor the chain,
 * in the order a resource server can act on: scheme, network, asset and its EIP-712 domain, the
 * payload's shape, then the authorization's payee and amount.
 */
export function checkPayment(
  request: X402VerifyRequest,
  tokensByNetwork: ReadonlyMap<string, ReadonlyMap<string, TokenDomain>>,
): Checked | Refusal {
  const requirements: X402PaymentRequirements = request.paymentRequirements;
  const accepted = request.paymentPayload.accepted;
  const payload = request.paymentPayload.payload;
  const claimedPayer = readPayer(payload);

  if (requirements.scheme !== "exact" || accepted.scheme !== "exact") {
    return {
      reason: X402ErrorReason.UnsupportedScheme,
      message: "this facilitator settles the exact scheme only",
      payer: claimedPayer,
    };
  }
  if (accepted.network !== requirements.network) {
    return {
      reason: X402ErrorReason.NetworkMismatch,
      message: "the payload was made for another network than the requirements name",
      payer: claimedPayer,
    };
  }
  const refused =
    checkToken(requirements, tokensByNetwork, claimedPayer) ??
    checkPayloadKind(requirements, payload, claimedPayer);
  if (refused !== undefined) return refused;
  return checkAuthorization(requirements, payload, claimedPayer);
}

/** The asset is one settled on the requirements' network, named with its EIP-712 name and version. */
function checkToken(
  requirements: X402PaymentRequirements,
  tokensByNetwork: ReadonlyMap<string, ReadonlyMap<string, TokenDomain>>,
  claimedPayer: string | undefined,
): Refusal | undefined {
  const tokens = tokensByNetwork.get(requirements.network);
  if (tokens === undefined) {
    return {
      reason: X402ErrorReason.InvalidNetwork,
      message: `this facilitator does not settle on ${requirements.network}; see GET /x402/supported`,
      payer: claimedPayer,
    };
  }
  const token = tokens.get(requirements.asset.toLowerCase());
  if (token === undefined) {
    return {
      reason: X402ErrorReason.InvalidPaymentRequirements,
      message: `this facilitator does not settle asset ${requirements.asset} on ${requirements.network}`,
      payer: claimedPayer,
    };
  }
  const name = requirements.extra?.name;
  const version = requirements.extra?.version;
  if (typeof name !== "string" || typeof version !== "string") {
    return {
      reason: X402ErrorReason.MissingEip712Domain,
      message: "requirements.extra must carry the token's EIP-712 name and version",
      payer: claimedPayer,
    };
  }
  if (name !== token.name) {
    return {
      reason: X402ErrorReason.TokenNameMismatch,
      message: `the token's EIP-712 name is ${JSON.stringify(token.name)}`,
      payer: claimedPayer,
    };
  }
  if (version !== token.version) {
    return {
      reason: X402ErrorReason.TokenVersionMismatch,
      message: `the token's EIP-712 version is ${JSON.stringify(token.version)}`,
      payer: claimedPayer,
    };
  }
  return undefined;
}

/** An EIP-3009 payload, for a decimal amount within a whole number of seconds. */
function checkPayloadKind(
  requirements: X402PaymentRequirements,
  payload: Record<string, unknown>,
  claimedPayer: string | undefined,
): Refusal | undefined {
  const transferMethod = requirements.extra?.assetTransferMethod;
  if ("permit2Authorization" in payload || (transferMethod !== undefined && transferMethod !== "eip3009")) {
    return {
      reason: X402ErrorReason.UnsupportedPayloadType,
      message: "this facilitator settles EIP-3009 transferWithAuthorization payloads only",
      payer: claimedPayer,
    };
  }
  if (
    !/^(0|[1-9][0-9]{0,77})$/.test(requirements.amount) ||
    !Number.isSafeInteger(requirements.maxTimeoutSeconds)
  ) {
    return {
      reason: X402ErrorReason.InvalidPaymentRequirements,
      message: "requirements.amount must be a decimal integer and maxTimeoutSeconds a whole number",
      payer: claimedPayer,
    };
  }
  return undefined;
}

/** The payload's authorization and signature: an ECDSA one, paying `payTo` exactly `amount`. */
function checkAuthorization(
  requirements: X402PaymentRequirements,
  payload: Record<string, unknown>,
  claimedPayer: string | undefined,
): Checked | Refusal {
  const parsed = X402ExactEip3009PayloadSchema.safeParse(payload);
  if (!parsed.success) {
    return {
      reason: X402ErrorReason.InvalidPayload,
      message:
        "payload must be { authorization: {from, to, value, validAfter, validBefore, nonce}, signature }",
      payer: claimedPayer,
    };
  }
  const { authorization, signature } = parsed.data;
  const payer = authorization.from;
  if (signature.length !== ECDSA_SIGNATURE_HEX_LENGTH) {
    // ERC-1271 / ERC-6492 smart-wallet signatures are longer; the token only checks ECDSA here.
    return {
      reason: X402ErrorReason.InvalidSignature,
      message: "only 65-byte ECDSA signatures of externally owned accounts are settled",
      payer,
    };
  }
  if (!sameAddress(authorization.to, requirements.payTo)) {
    return {
      reason: X402ErrorReason.RecipientMismatch,
      message: "authorization.to differs from requirements.payTo",
      payer,
    };
  }
  if (BigInt(authorization.value) !== BigInt(requirements.amount)) {
    return {
      reason: X402ErrorReason.AuthorizationValueMismatch,
      message: `authorization.value must equal requirements.amount (${requirements.amount})`,
      payer,
    };
  }
  return {
    payment: {
      network: requirements.network,
      token: requirements.asset,
      authorization,
      signature: signature as `0x${string}`,
    },
    payer,
    maxTimeoutSeconds: requirements.maxTimeoutSeconds,
  };
}

/**
 * The validity window against our clock. EIP-3009: `validAfter < now < validBefore`, and some
 * seconds must remain to settle. The window may not outlast `maxTimeoutSeconds` from now (give or take
 * clock skew): the resource server asked for a payment that completes within that time, and a
 * longer-lived authorization would stay spendable after the server stopped expecting it.
 */
export function checkWindow(checked: Checked, now: number): Refusal | undefined {
  const { authorization: a } = checked.payment;
  const validBefore = BigInt(a.validBefore);
  if (validBefore <= BigInt(now + MIN_REMAINING_SECONDS)) {
    return {
      reason: X402ErrorReason.ValidBeforeExpired,
      message: `the authorization has expired or expires within ${MIN_REMAINING_SECONDS} s`,
      payer: checked.payer,
    };
  }
  if (BigInt(a.validAfter) >= BigInt(now)) {
    return {
      reason: X402ErrorReason.ValidAfterInFuture,
      message: "the authorization is not valid yet",
      payer: checked.payer,
    };
  }
  if (validBefore > BigInt(now + checked.maxTimeoutSeconds + MAX_CLOCK_SKEW_SECONDS)) {
    return {
      reason: X402ErrorReason.ValidBeforeExpired,
      message: `the authorization stays valid longer than maxTimeoutSeconds (${checked.maxTimeoutSeconds} s)`,
      payer: checked.payer,
    };
  }
  return undefined;
}

/** `authorization.from` of a payload not yet validated, for the `payer` of an early refusal. */
function readPayer(payload: Record<string, unknown>): string | undefined {
  const authorization = payload.authorization;
  if (authorization === null || typeof authorization !== "object") return undefined;
  const from = (authorization as Record<string, unknown>).from;
  return typeof from === "string" && /^0x[0-9a-fA-F]{40}$/.test(from) ? from : undefined;
}
