/**
 * The specification's standalone `verifyPaymentProof(proof)` (docs/protocol.md, "Payment proof"; docs/gate.md): is this a genuine,
 * unexpired proof of a settled payment? A boolean, for code outside a gate (an audit, a handler that
 * receives a proof some other way). It is not the gate's acceptance: it does not check a memo against a
 * request, and it does not consume anything, so a `true` proof may already have been used at a gate.
 *
 * Where the answer comes from. A proof names its signing key (`kid`) but not its facilitator (the wire
 * format has no such field), so the facilitator comes from configuration:
 * - `facilitator` (a URL or client): Ed25519 against its JWKS, fetched once per verifier, refreshed on
 *   an unknown `kid` at most once per 30 s;
 * - `keys`: a pinned JWKS or resolver;
 * - `publicClient` (a viem public client on the proof's chain): on chain, without trusting any
 *   facilitator — the proof's `tx` succeeded and, in it, the token recorded the EIP-3009 authorization
 *   `(payer, keccak256(memo))` followed by its `Transfer(payer → payTo, amount)`.
 * Several given: every one must agree. None: `TollgateError("InvalidRequest")` saying what is missing,
 * never a `TypeError`. `createProofVerifier` keeps one configuration (and its key cache) for many
 * calls, and a gate's `gate.verifyPaymentProof(proof)` uses the gate's own facilitator.
 *
 * Outcomes: `false` for anything that is not a good proof (not a proof at all, expired, unknown key,
 * bad signature, a transaction that does not pay it); a thrown `ChainUnavailable` when the check could
 * not be carried out (JWKS or RPC unreachable), so a caller never mistakes an outage for a forgery.
 */
import { getAbiItem, type Hex, keccak256, type PublicClient, parseEventLogs, stringToBytes } from "viem";
import { fiatTokenV2_2Abi } from "../../../chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import {
  createFacilitatorClient,
  type FacilitatorClient,
  type FetchFn,
} from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { type Clock, systemClock, unixSeconds } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { type Jwks, JwksSchema } from "../../../protocol/facilitator.ts";
import { chainIdOf } from "../../../protocol/network.ts";
import { type PaymentProof, PaymentProofSchema } from "../../../protocol/paymentProof.ts";
import {
  checkSignatureWithKeys,
  type ProofSignatureCheck,
  type SignatureVerdict,
} from "./checkPaymentProof.ts";
import { safeParsePaymentProof } from "./parsePaymentProof.ts";
import { createJwksResolver, createStaticKeyResolver, type ProofKeyResolver } from "./proofKeyResolver.ts";

/** The reads an on-chain verification needs; a viem `PublicClient` on the proof's chain satisfies it. */
export type ProofChainClient = Pick<PublicClient, "getTransactionReceipt" | "getChainId">;

export type ProofVerifierOptions = {
  /** The facilitator whose JWKS signs proofs: its base URL or a client for it. */
  facilitator?: string | Pick<FacilitatorClient, "jwks"> | undefined;
  /** The facilitator's keys, pinned: a JWKS or a resolver (instead of fetching them). */
  keys?: Jwks | ProofKeyResolver | undefined;
  /** Verify on chain through this client (the proof's transaction paid the proof's terms). */
  publicClient?: ProofChainClient | undefined;
  /** The `fetch` used when `facilitator` is a URL (default: the global one, read once). */
  fetch?: FetchFn | undefined;
  /** For `exp` (default: the system clock). */
  clock?: Clock | undefined;
};

/** A verdict with its reason, for code that wants to say why a proof is refused. */
export type ProofCheck = { valid: true } | { valid: false; reason: string };

export type ProofVerifier = {
  /** The specification's call: `true` for a genuine, unexpired proof. Accepts the proof or its `X-PAYMENT` text. */
  verifyPaymentProof(proof: unknown): Promise<boolean>;
  /** The same check, with the reason of a refusal. */
  explainPaymentProof(proof: unknown): Promise<ProofCheck>;
};

/**
 * A verifier with one configuration and one key cache, whose `verifyPaymentProof(proof)` is bound
 * (it may be destructured and passed around).
 *
 * @example
 * const { verifyPaymentProof } = createProofVerifier({ facilitator: "https://facilitator.example.com" });
 * if (await verifyPaymentProof(parsePaymentProof(request.headers.get("x-payment") ?? ""))) serve();
 */
export function createProofVerifier(options: ProofVerifierOptions): ProofVerifier {
  const clock = options.clock ?? systemClock;
  const checks: ProofSignatureCheck[] = [];
  const keys = keyResolverOf(options, clock);
  if (keys !== undefined) checks.push(checkSignatureWithKeys(keys));
  if (options.publicClient !== undefined) checks.push(checkOnChain(options.publicClient));
  if (checks.length === 0) {
    throw new TollgateError(
      "InvalidRequest",
      "verifyPaymentProof: nothing to verify the proof against: give `facilitator` (its JWKS), `keys`, or `publicClient` (on chain), or call `gate.verifyPaymentProof(proof)` on a configured gate",
      { details: { reason: "no_verifier" } },
    );
  }
  const explainPaymentProof = async (value: unknown): Promise<ProofCheck> => {
    const proof = toPaymentProof(value);
    if (proof === undefined) return { valid: false, reason: "not a payment proof" };
    if (proof.exp <= unixSeconds(clock)) return { valid: false, reason: "proof has expired" };
    for (const check of checks) {
      const verdict: SignatureVerdict = await check(proof);
      if (!verdict.valid) return verdict;
    }
    return { valid: true };
  };
  return {
    explainPaymentProof,
    verifyPaymentProof: async (value) => (await explainPaymentProof(value)).valid,
  };
}

/**
 * The specification's `verifyPaymentProof(proof)`: `true` for a genuine, unexpired proof, checked
 * against `options` (see the module comment). Each call builds its own verifier, so keys are fetched
 * per call: keep a `createProofVerifier` (or use `gate.verifyPaymentProof`) for many proofs.
 * Throws `InvalidRequest` when nothing to verify against is configured, `ChainUnavailable` when the
 * check cannot be carried out; never a `TypeError`.
 *
 * @example
 * const ok = await verifyPaymentProof(proof, { facilitator: "https://facilitator.example.com" });
 */
export function verifyPaymentProof(proof: unknown, options: ProofVerifierOptions = {}): Promise<boolean> {
  try {
    return createProofVerifier(options ?? {}).verifyPaymentProof(proof);
  } catch (error) {
    return Promise.reject(error);
  }
}

/** A parsed proof from a proof object or its `X-PAYMENT` text; `undefined` for anything else. */
export function toPaymentProof(value: unknown): PaymentProof | undefined {
  if (typeof value === "string") {
    const parsed = safeParsePaymentProof(value);
    return parsed.ok ? parsed.proof : undefined;
  }
  const parsed = PaymentProofSchema.safeParse(value);
  return parsed.success ? parsed.data : undefined;
}

function keyResolverOf(options: ProofVerifierOptions, clock: Clock): ProofKeyResolver | undefined {
  if (options.keys !== undefined) {
    if ("resolve" in options.keys) return options.keys;
    const jwks = JwksSchema.safeParse(options.keys);
    if (!jwks.success) {
      throw new TollgateError("InvalidRequest", "verifyPaymentProof: `keys` is not a JWKS", {
        cause: jwks.error,
      });
    }
    return createStaticKeyResolver(jwks.data);
  }
  const facilitator = options.facilitator;
  if (facilitator === undefined) return undefined;
  const client =
    typeof facilitator === "string"
      ? createFacilitatorClient({ url: facilitator, fetch: options.fetch ?? globalThis.fetch })
      : facilitator;
  return createJwksResolver({ loadJwks: () => client.jwks(), clock });
}

const authorizationUsed = getAbiItem({ abi: fiatTokenV2_2Abi, name: "AuthorizationUsed" });

/**
 * On-chain check: the proof's transaction succeeded on the proof's chain and, in it, the proof's token
 * emitted `AuthorizationUsed(payer, keccak256(memo))` (EIP-3009: the nonce binds the memo,
 * docs/protocol.md, "Signed payment") and, after it, `Transfer(payer, payTo, amount)`. A batch settlement carries many transfers;
 * the authorization log pins the one of this payment.
 */
function checkOnChain(client: ProofChainClient): ProofSignatureCheck {
  return async (proof) => {
    let chainId: number;
    let receipt: Awaited<ReturnType<ProofChainClient["getTransactionReceipt"]>>;
    try {
      chainId = await client.getChainId();
      if (chainId !== chainIdOf(proof.network)) {
        return { valid: false, reason: `proof is for ${proof.network}, the client reads chain ${chainId}` };
      }
      receipt = await client.getTransactionReceipt({ hash: proof.tx });
    } catch (error) {
      if ((error as Error).name === "TransactionReceiptNotFoundError") {
        return { valid: false, reason: "the proof's transaction is not on chain" };
      }
      throw new TollgateError("ChainUnavailable", "the chain could not be read to verify the proof", {
        cause: error,
        retryAfter: 5,
      });
    }
    if (receipt.status !== "success") return { valid: false, reason: "the proof's transaction reverted" };
    const fromToken = receipt.logs.filter((log) => sameAddress(log.address, proof.token));
    const nonce: Hex = keccak256(stringToBytes(proof.memo));
    const used = parseEventLogs({ abi: [authorizationUsed], logs: fromToken }).find(
      (log) => sameAddress(log.args.authorizer, proof.payer) && log.args.nonce === nonce,
    );
    if (used === undefined) {
      return {
        valid: false,
        reason: "the proof's transaction did not use the payer's authorization for this memo",
      };
    }
    const transfer = parseEventLogs({ abi: fiatTokenV2_2Abi, logs: fromToken, eventName: "Transfer" }).find(
      (log) => log.logIndex > used.logIndex,
    );
    const pays =
      transfer !== undefined &&
      sameAddress(transfer.args.from, proof.payer) &&
      sameAddress(transfer.args.to, proof.payTo) &&
      transfer.args.value === BigInt(proof.amount);
    return pays ? { valid: true } : { valid: false, reason: "the proof's transaction did not pay its terms" };
  };
}
