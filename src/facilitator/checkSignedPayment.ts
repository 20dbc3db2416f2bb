/**
 * The facilitator's off-chain checks of a signed payment (docs/facilitator.md, "Checks before settling"): everything
 * that can be refused without a round trip to the chain, cheapest first. Throws a `TollgateError`
 * with the code a client can act on; returns the payer on success.
 *
 * The signature is recovered locally; an EOA paying with its own key costs nothing more. A signature
 * that does not recover to `from` is asked of `from` through the chain (ERC-1271, contractSigners.ts)
 * when the context has `contractSigners`: a smart-contract wallet's owner signs for it, and the token
 * (USDC v2.2's `bytes signature` overload) asks the wallet the same question when it settles.
 */
import { type Address, getAddress, hexToBigInt } from "viem";
import { recoverDigestSigner, transferAuthorizationDigest } from "../chain/signers/recoverTransferSigner.ts";
import { sameAddress } from "../protocol/address.ts";
import { base64UrlDecode, utf8Decode } from "../protocol/base64.ts";
import { TollgateError } from "../protocol/errors.ts";
import { memoNonce } from "../protocol/memo.ts";
import { chainIdOf } from "../protocol/network.ts";
import type { Authorization } from "../protocol/signedPayment.ts";
import type { ContractSigners } from "./contractSigners.ts";

/** secp256k1 group order / 2: EIP-2 and the token contracts refuse an `s` above it. */
const HALF_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n;

export type SupportedTokenConfig = {
  address: Address;
  name: string;
  version: string;
  symbol: string;
  /**
   * The smallest payment settled in this token, smallest unit (docs/facilitator.md, "Abuse: minimum amount and rate limits"): below it the
   * gas of settling costs the facilitator more than the payment is worth. Never below 1: a zero-value
   * transfer moves nothing, needs no balance, and would only spend the facilitator's gas.
   */
  minAmount?: bigint | undefined;
};

/** Every token refuses a zero-value payment, whatever its configured minimum. */
export function minimumAmountOf(token: Pick<SupportedTokenConfig, "minAmount">): bigint {
  const configured = token.minAmount ?? 1n;
  return configured < 1n ? 1n : configured;
}

export type PaymentCheckContext = {
  network: string;
  tokens: ReadonlyMap<string, SupportedTokenConfig>;
  nowSeconds: number;
  /**
   * Seconds of validity an authorization must have left when it arrives, so that it cannot expire
   * while it waits in a batch (EIP-3009: validBefore is exclusive).
   */
  minRemainingSeconds: number;
  /** Checks a signature that does not recover to `from` with `from`'s ERC-1271 `isValidSignature`. */
  contractSigners?: ContractSigners | undefined;
};

export type CheckablePayment = {
  network: string;
  token: string;
  /** Present for Tollgate payments; x402 payments carry an arbitrary nonce and no memo. */
  memo?: string | undefined;
  authorization: Authorization;
  signature: `0x${string}`;
};

export function tokenConfigOf(
  context: Pick<PaymentCheckContext, "network" | "tokens">,
  payment: CheckablePayment,
) {
  if (payment.network !== context.network) {
    throw new TollgateError("UnsupportedNetwork", `this facilitator settles on ${context.network}`, {
      details: { network: payment.network, supported: [context.network] },
    });
  }
  const token = context.tokens.get(payment.token.toLowerCase());
  if (token === undefined) {
    throw new TollgateError("UnsupportedToken", "this facilitator does not settle that token", {
      details: { token: payment.token, supported: [...context.tokens.values()].map((t) => t.address) },
    });
  }
  return token;
}

/** Checks a payment's fields, window and signature. Returns its signer, `from` checksummed. */
export async function checkSignedPayment(
  context: PaymentCheckContext,
  payment: CheckablePayment,
): Promise<Address> {
  const token = tokenConfigOf(context, payment);
  const a = payment.authorization;
  checkMinimumAmount(token, a);

  if (payment.memo !== undefined) {
    if (a.nonce !== memoNonce(payment.memo)) {
      throw new TollgateError("InvalidRequest", "authorization nonce must be keccak256(utf8(memo))", {
        details: { nonce: a.nonce, expected: memoNonce(payment.memo) },
      });
    }
    checkMemoTerms(payment.memo, payment, a, context);
  }

  const validAfter = BigInt(a.validAfter);
  const validBefore = BigInt(a.validBefore);
  const now = BigInt(context.nowSeconds);
  if (validBefore <= now + BigInt(context.minRemainingSeconds)) {
    throw new TollgateError(
      "AuthorizationExpired",
      "authorization has expired or expires too soon to settle",
      {
        details: {
          validBefore: a.validBefore,
          now: context.nowSeconds,
          minRemaining: context.minRemainingSeconds,
        },
      },
    );
  }
  if (validAfter >= now) {
    throw new TollgateError("AuthorizationExpired", "authorization is not valid yet", {
      details: { validAfter: a.validAfter, now: context.nowSeconds },
    });
  }

  const cacheKey = recoveryKey(token, payment);
  const cached = recoveredSigners.get(cacheKey);
  if (cached !== undefined) return cached;
  const signer = await signerOf(token, payment, context.contractSigners);
  if (recoveredSigners.size >= MAX_RECOVERED_SIGNERS) {
    const oldest = recoveredSigners.keys().next();
    if (oldest.done !== true) recoveredSigners.delete(oldest.value);
  }
  recoveredSigners.set(cacheKey, signer);
  return signer;
}

/**
 * The minimum is a check of its own, shared by `/authorize` and the x402 endpoints (both reach it
 * through `checkSignedPayment`): a payment below it is refused before any chain read.
 */
export function checkMinimumAmount(token: SupportedTokenConfig, a: Pick<Authorization, "value">): void {
  const minimum = minimumAmountOf(token);
  if (BigInt(a.value) < minimum) {
    // AmountMismatch (422): the amount is not one this facilitator settles; x402 maps it to its
    // invalid-value reason, so both paths refuse it alike.
    throw new TollgateError(
      "AmountMismatch",
      `this facilitator settles payments of at least ${minimum} (smallest unit of ${token.symbol}); the gate must price above it`,
      {
        details: {
          reason: "amount_below_minimum",
          value: a.value,
          minimum: minimum.toString(),
          token: token.address,
        },
      },
    );
  }
}

/**
 * Signers of recent payments whose signature checked out, by everything the signature covers. Recovery
 * is a pure function of that key, so a hit is always right; it saves the second recovery (or, for a
 * wallet, the second chain read) when a payment is checked before admission (rate limits) and again by
 * the settlement engine. A wallet's answer could change within the entry's life (its owner rotated):
 * the settlement's simulation and the token itself check it again. Refusals are not cached. Bounded,
 * oldest first out.
 */
const recoveredSigners = new Map<string, Address>();
const MAX_RECOVERED_SIGNERS = 4_096;

function recoveryKey(token: SupportedTokenConfig, payment: CheckablePayment): string {
  const a = payment.authorization;
  return [
    payment.network,
    token.address.toLowerCase(),
    token.name,
    token.version,
    a.from.toLowerCase(),
    a.to.toLowerCase(),
    a.value,
    a.validAfter,
    a.validBefore,
    a.nonce.toLowerCase(),
    payment.signature.toLowerCase(),
  ].join("|");
}

/**
 * `from`, once its signature is shown good: recovered locally to `from` with a low s (EIP-2, as the
 * token's ECDSA path requires), or else accepted by `from`'s own `isValidSignature`. Throws
 * `InvalidSignature` otherwise.
 */
async function signerOf(
  token: SupportedTokenConfig,
  payment: CheckablePayment,
  contractSigners: ContractSigners | undefined,
): Promise<Address> {
  const a = payment.authorization;
  const highS = hexToBigInt(`0x${payment.signature.slice(66, 130)}`) > HALF_ORDER;
  let digest: Uint8Array;
  try {
    digest = transferAuthorizationDigest(
      {
        name: token.name,
        version: token.version,
        chainId: chainIdOf(payment.network),
        verifyingContract: token.address,
      },
      a,
    );
  } catch (cause) {
    throw new TollgateError("InvalidSignature", "the authorization's fields cannot be signed as typed", {
      cause,
    });
  }
  const recovered = highS ? undefined : recoverDigestSigner(digest, payment.signature);
  if (recovered !== undefined && sameAddress(recovered, a.from)) return recovered;
  // Not the EOA `from`'s own signature: `from` may be a wallet whose signer this is.
  const hash = `0x${Buffer.from(digest).toString("hex")}` as const;
  if (
    contractSigners !== undefined &&
    (await contractSigners.isValidSignature(a.from, hash, payment.signature))
  ) {
    return getAddress(a.from);
  }
  if (highS) {
    throw new TollgateError("InvalidSignature", "signature has a high s value (EIP-2); sign again", {});
  }
  if (recovered === undefined) {
    throw new TollgateError("InvalidSignature", "signature does not recover to an address", {});
  }
  throw new TollgateError("InvalidSignature", "signature was not made by the authorization's `from`", {
    details: { from: a.from, recovered },
  });
}

/**
 * A memo's claims must agree with the authorization. The facilitator cannot check the memo's HMAC
 * (the gate holds that secret), but it can refuse a transfer that does not pay what the memo priced:
 * such a payment would be refused by the gate after the money had moved.
 */
function checkMemoTerms(
  memo: string,
  payment: CheckablePayment,
  a: Authorization,
  context: Pick<PaymentCheckContext, "nowSeconds" | "minRemainingSeconds">,
): void {
  let claims: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(utf8Decode(base64UrlDecode(memo.slice(0, memo.indexOf(".")))));
    if (parsed === null || typeof parsed !== "object") throw new Error("not an object");
    claims = parsed as Record<string, unknown>;
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "memo payload is not readable JSON", { cause });
  }
  if (claims.a !== a.value) {
    throw new TollgateError("AmountMismatch", "authorization value differs from the amount the memo priced", {
      details: { value: a.value, memoAmount: claims.a },
    });
  }
  if (typeof claims.t !== "string" || !sameAddress(claims.t, a.to)) {
    throw new TollgateError("InvalidRequest", "authorization pays another address than the memo's payTo", {
      details: { to: a.to, memoPayTo: claims.t },
    });
  }
  if (claims.n !== payment.network) {
    throw new TollgateError("UnsupportedNetwork", "the memo was priced on another network", {
      details: { network: payment.network, memoNetwork: claims.n },
    });
  }
  if (typeof claims.k !== "string" || !sameAddress(claims.k, payment.token)) {
    throw new TollgateError("UnsupportedToken", "the memo was priced in another token", {
      details: { token: payment.token, memoToken: claims.k },
    });
  }
  // The gate refuses a proof for a memo past its expiry (`e`), so settling one moves the money and
  // serves nothing. The same margin as the authorization's window: the memo must outlive settlement.
  if (typeof claims.e !== "number" || !Number.isSafeInteger(claims.e) || claims.e <= 0) {
    throw new TollgateError("InvalidRequest", "memo has no expiry (`e`, Unix seconds)", {
      details: { memoExpiry: claims.e },
    });
  }
  if (claims.e <= context.nowSeconds + context.minRemainingSeconds) {
    throw new TollgateError(
      "AuthorizationExpired",
      "the memo (the gate's offer) has expired or expires before the payment could settle; ask the gate for a fresh 402",
      {
        details: {
          reason: "memo_expired",
          memoExpiresAt: claims.e,
          now: context.nowSeconds,
          minRemaining: context.minRemainingSeconds,
        },
      },
    );
  }
}
