/**
 * Request and response bodies of the facilitator's HTTP API (docs/protocol.md, "Facilitator bodies") that the protocol pins:
 * `/authorize`, `/verify`, `/payments/:nonce`, `/supported`, `/.well-known/jwks.json`, `/healthz`. Error replies use
 * `ErrorBodySchema` from `errors.ts`; `POST /authorize`'s request is in `signedPayment.ts`.
 */
import { z } from "zod";
import { AddressSchema, Hex32Schema } from "./address.ts";
import { UintStringSchema } from "./amount.ts";
import { NetworkSchema } from "./network.ts";
import { KeyIdSchema, PaymentProofSchema } from "./paymentProof.ts";
import { PaymentSchemeSchema } from "./paymentRequired.ts";

/**
 * `POST /authorize` reply. `settled` describes the confirmed transaction when the facilitator has it
 * to hand; a replayed authorization (same signed payment) returns the same proof and may omit it.
 */
export const AuthorizeResponseSchema = z.object({
  proof: PaymentProofSchema,
  settled: z
    .object({
      transaction: Hex32Schema,
      blockNumber: UintStringSchema,
      /** How many payments the settling batch transaction carried (1 when not batched). */
      batchSize: z.int().positive().optional(),
    })
    .optional(),
});
export type AuthorizeResponse = z.infer<typeof AuthorizeResponseSchema>;

/** `POST /verify` request: a gate asking the facilitator to check a proof it cannot check itself. */
export const VerifyRequestSchema = z.object({ proof: PaymentProofSchema });
export type VerifyRequest = z.infer<typeof VerifyRequestSchema>;

/**
 * `POST /verify` reply. An invalid proof is an expected outcome, so it is data with a `reason`
 * (a short snake_case word such as `bad_signature`, `unknown_kid`, `expired`), never an HTTP error.
 */
export const VerifyResponseSchema = z.object({
  valid: z.boolean(),
  reason: z.string().max(200).optional(),
});
export type VerifyResponse = z.infer<typeof VerifyResponseSchema>;

/**
 * `GET /payments/:nonce` reply: a payment the facilitator knows, by its EIP-3009 nonce
 * (= keccak256(memo)). `transaction` is null until a batch carrying it was signed; `proof` is present
 * once a Tollgate payment settled (an x402 payment has none); `failure` once it failed.
 */
export const PaymentRecordSchema = z.object({
  nonce: Hex32Schema,
  status: z.enum(["pending", "submitted", "settled", "failed"]),
  network: NetworkSchema,
  token: AddressSchema,
  payer: AddressSchema,
  payTo: AddressSchema,
  amount: UintStringSchema,
  transaction: Hex32Schema.nullable(),
  proof: PaymentProofSchema.optional(),
  failure: z.object({ code: z.string().max(64), message: z.string().max(500).nullable() }).optional(),
});
export type PaymentRecord = z.infer<typeof PaymentRecordSchema>;

/** A token the facilitator settles, with the EIP-712 domain its EIP-3009 signatures use. */
export const SupportedTokenSchema = z.object({
  address: AddressSchema,
  symbol: z.string().min(1).max(32),
  decimals: z.int().min(0).max(77),
  /** EIP-712 domain name and version of the token (USDC: "USD Coin", "2"). */
  eip712: z.object({ name: z.string().min(1).max(128), version: z.string().min(1).max(32) }),
  /**
   * The smallest payment the facilitator settles in this token now, smallest unit (a gate prices above
   * it): `minAmountFloor`, or more while the network's fee makes settling dear (`settlementCost`).
   */
  minAmount: UintStringSchema.optional(),
  /** The configured minimum: `minAmount` never falls below it, whatever the fee. */
  minAmountFloor: UintStringSchema.optional(),
  /**
   * What settling one payment in a batch costs at the latest block's fee, smallest unit (gas, plus the
   * L1 data fee on OP-stack chains), and the largest share of a payment's value it may be: `minAmount`
   * is at least `amount / maxFeeShare`.
   */
  settlementCost: z
    .object({
      amount: UintStringSchema,
      maxFeeShare: z.string().regex(/^\d+(\.\d+)?$/),
      blockNumber: UintStringSchema,
    })
    .optional(),
});
export type SupportedToken = z.infer<typeof SupportedTokenSchema>;

/** One network the facilitator serves, with Tollgate's contracts on it. */
export const SupportedNetworkSchema = z.object({
  network: NetworkSchema,
  tokens: z.array(SupportedTokenSchema),
  /** Batch-settlement contract that settles several authorizations in one transaction. */
  batchSettler: AddressSchema.optional(),
  /** `SubscriptionManager` contract, when subscriptions are offered on this network. */
  subscriptionManager: AddressSchema.optional(),
  /** `TollgateChannels` contract, when the facilitator relays opens and claims channels (docs/channels.md). */
  channels: AddressSchema.optional(),
  /** Addresses the facilitator sends transactions from (operators of providers' plans). */
  signers: z.array(AddressSchema).optional(),
});
export type SupportedNetwork = z.infer<typeof SupportedNetworkSchema>;

/** `GET /supported` reply. */
export const SupportedResponseSchema = z.object({
  version: z.literal("1"),
  schemes: z.array(PaymentSchemeSchema),
  networks: z.array(SupportedNetworkSchema),
});
export type SupportedResponse = z.infer<typeof SupportedResponseSchema>;

/** An Ed25519 public key (RFC 8037) as base64url: 32 bytes → 43 characters, 2 unused bits zero. */
const Ed25519PublicKeySchema = z.string().regex(/^[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]$/, {
  error: "expected a 32-byte Ed25519 public key as base64url",
});

/** One proof-signing key in the facilitator's JWKS (RFC 7517 / RFC 8037 `OKP` key). */
export const JwkSchema = z.object({
  kty: z.literal("OKP"),
  crv: z.literal("Ed25519"),
  x: Ed25519PublicKeySchema,
  kid: KeyIdSchema,
  alg: z.literal("EdDSA").optional(),
  use: z.literal("sig").optional(),
});
export type Jwk = z.infer<typeof JwkSchema>;

/** `GET /.well-known/jwks.json` reply: the active key first, then keys still honoured after rotation. */
export const JwksSchema = z.object({ keys: z.array(JwkSchema).max(32) });
export type Jwks = z.infer<typeof JwksSchema>;

/** `GET /healthz` reply. `degraded` still serves but something it depends on is failing. */
export const HealthSchema = z.object({
  status: z.enum(["ok", "degraded"]),
  version: z.string().optional(),
  /** Per-dependency results, e.g. `{ chain: { ok: true }, store: { ok: false, message } }`. */
  checks: z
    .record(
      z.string(),
      z.object({
        ok: z.boolean(),
        message: z.string().optional(),
        /** When a check that is not ok began failing (ISO 8601), where known: `token` while paused. */
        since: z.string().optional(),
        /**
         * Figures behind the check, for the operator only (a metrics reader: metricsAccess.ts): the gas
         * key's balance and runway, the base fee against the maximum fee. Amounts as decimal strings.
         */
        details: z.record(z.string(), z.union([z.string(), z.number(), z.null()])).optional(),
      }),
    )
    .optional(),
});
export type Health = z.infer<typeof HealthSchema>;

/** States of an on-chain subscription (docs/contracts.md), as the facilitator reports them. */
export const SubscriptionStatusSchema = z.enum(["Active", "Paused", "Cancelled", "PastDue"]);
export type SubscriptionStatus = z.infer<typeof SubscriptionStatusSchema>;
