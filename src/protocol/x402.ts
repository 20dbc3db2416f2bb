/**
 * x402 v2 wire schemas (docs/x402.md), so standard x402 clients can pay a Tollgate gate with the
 * `exact` EVM scheme and standard x402 resource servers can use Tollgate's facilitator.
 *
 * Matched against `@x402/core` 2.27.0: the zod schemas in `src/schemas/index.ts`
 * (`ResourceInfoSchema`, `PaymentRequirementsV2Schema`, `PaymentRequiredV2Schema`,
 * `PaymentPayloadV2Schema`), the facilitator client's reply schemas in `src/http`
 * (`verifyResponseSchema`, `settleResponseSchema`, `supportedResponseSchema`), the request bodies
 * `HTTPFacilitatorClient.verify/settle` post (`{ x402Version, paymentPayload, paymentRequirements }`)
 * and the header names of `x402HTTPClient`/`x402HTTPResourceServer` (`PAYMENT-REQUIRED`,
 * `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`, each `base64(JSON)`). The `exact` EVM payload and the
 * error reasons follow `@x402/evm` 2.27.0 (`ExactEIP3009Payload`, `src/exact/facilitator/errors.ts`).
 *
 * Generic schemas are as permissive as x402's own (loose objects keep unknown fields, `null` is
 * accepted where x402 accepts it) so that a payload relayed back to a facilitator is unchanged.
 * The `X402Exact*` schemas are the strict subset Tollgate settles.
 */
import { z } from "zod";
import { AddressSchema, HexSchema } from "./address.ts";
import { AtomicAmountSchema } from "./amount.ts";
import { NetworkSchema } from "./network.ts";
import { AuthorizationSchema } from "./signedPayment.ts";

export const X402_VERSION = 2;

/**
 * The key of `paymentRequirements.extra` where a Tollgate gate names itself when it settles an x402
 * payment (`x402GateId`). The facilitator answers such a request `success` again on an identical
 * retry, because the gate keeps a replay guard; a standard x402 resource server sends no such key and
 * is answered `success` once (docs/x402.md, "Replays").
 */
export const X402_GATE_EXTRA = "tollgateGate";

const NonEmpty = z.string().min(1);
const AnyRecord = z.record(z.string(), z.unknown());
/** x402 CAIP-2 check: at least three characters with a colon (any chain family). */
const X402NetworkSchema = z
  .string()
  .min(3)
  .refine((text) => text.includes(":"), {
    error: "expected a CAIP-2 network such as eip155:84532",
  });

/** `resource` of a PaymentRequired / PaymentPayload: the URL being paid for and how to show it. */
export const X402ResourceInfoSchema = z.looseObject({
  url: NonEmpty,
  description: z.string().nullish(),
  mimeType: z.string().nullish(),
  serviceName: z.string().nullish(),
  tags: z.array(z.string()).nullish(),
  iconUrl: z.string().nullish(),
});
export type X402ResourceInfo = z.infer<typeof X402ResourceInfoSchema>;

/** One x402 v2 payment option (`PaymentRequirements`). */
export const X402PaymentRequirementsSchema = z.looseObject({
  scheme: NonEmpty,
  network: X402NetworkSchema,
  /** Smallest-unit amount as a decimal string. */
  amount: NonEmpty,
  /** Token contract address for EVM. */
  asset: NonEmpty,
  payTo: NonEmpty,
  maxTimeoutSeconds: z.number().positive(),
  extra: AnyRecord.nullish(),
});
export type X402PaymentRequirements = z.infer<typeof X402PaymentRequirementsSchema>;

/** The object in the `PAYMENT-REQUIRED` header of a 402. */
export const X402PaymentRequiredSchema = z.looseObject({
  x402Version: z.literal(2),
  error: z.string().nullish(),
  resource: X402ResourceInfoSchema,
  accepts: z.array(X402PaymentRequirementsSchema).min(1),
  extensions: AnyRecord.nullish(),
});
export type X402PaymentRequired = z.infer<typeof X402PaymentRequiredSchema>;

/** The object in the `PAYMENT-SIGNATURE` header: the option the client accepted and its signed payload. */
export const X402PaymentPayloadSchema = z.looseObject({
  x402Version: z.literal(2),
  resource: X402ResourceInfoSchema.nullish(),
  accepted: X402PaymentRequirementsSchema,
  payload: AnyRecord,
  extensions: AnyRecord.nullish(),
});
export type X402PaymentPayload = z.infer<typeof X402PaymentPayloadSchema>;

/** Body of `POST /x402/verify` (x402 facilitators: `POST /verify`). */
export const X402VerifyRequestSchema = z.looseObject({
  x402Version: z.number(),
  paymentPayload: X402PaymentPayloadSchema,
  paymentRequirements: X402PaymentRequirementsSchema,
});
export type X402VerifyRequest = z.infer<typeof X402VerifyRequestSchema>;

/** Body of `POST /x402/settle`: the same shape as verify. */
export const X402SettleRequestSchema = X402VerifyRequestSchema;
export type X402SettleRequest = X402VerifyRequest;

/** Reply of `/verify`. A refusal is `isValid: false` with an `invalidReason` (see `X402ErrorReason`). */
export const X402VerifyResponseSchema = z.looseObject({
  isValid: z.boolean(),
  invalidReason: z.string().nullish(),
  invalidMessage: z.string().nullish(),
  payer: z.string().nullish(),
  extensions: AnyRecord.nullish(),
  extra: AnyRecord.nullish(),
});
export type X402VerifyResponse = z.infer<typeof X402VerifyResponseSchema>;

/** Reply of `/settle`, and the object in the `PAYMENT-RESPONSE` header. `transaction` is "" on failure. */
export const X402SettleResponseSchema = z.looseObject({
  success: z.boolean(),
  errorReason: z.string().nullish(),
  errorMessage: z.string().nullish(),
  payer: z.string().nullish(),
  transaction: z.string(),
  network: z.string(),
  /** Amount actually settled (schemes like `upto`); absent for `exact`. */
  amount: z.string().nullish(),
  extensions: AnyRecord.nullish(),
  extra: AnyRecord.nullish(),
});
export type X402SettleResponse = z.infer<typeof X402SettleResponseSchema>;

/** One `(version, scheme, network)` a facilitator supports. */
export const X402SupportedKindSchema = z.looseObject({
  x402Version: z.number(),
  scheme: z.string(),
  network: z.string(),
  extra: AnyRecord.nullish(),
});
export type X402SupportedKind = z.infer<typeof X402SupportedKindSchema>;

/** Reply of `GET /x402/supported`; `signers` maps a CAIP family (`eip155:*`) to signer addresses. */
export const X402SupportedResponseSchema = z.looseObject({
  kinds: z.array(X402SupportedKindSchema),
  extensions: z.array(z.string()).default([]),
  signers: z.record(z.string(), z.array(z.string())).default({}),
});
export type X402SupportedResponse = z.infer<typeof X402SupportedResponseSchema>;

/**
 * `extra` of an `exact` EVM option: the token's EIP-712 domain name and version, which x402 clients
 * need to sign. `assetTransferMethod` absent means EIP-3009, the only method Tollgate settles.
 */
export const X402ExactEvmExtraSchema = z.looseObject({
  name: NonEmpty,
  version: NonEmpty,
  assetTransferMethod: z.literal("eip3009").optional(),
});

/** An `exact` EVM option as Tollgate emits and settles it. */
export const X402ExactRequirementsSchema = z.looseObject({
  scheme: z.literal("exact"),
  network: NetworkSchema,
  amount: AtomicAmountSchema,
  asset: AddressSchema,
  payTo: AddressSchema,
  maxTimeoutSeconds: z.int().positive(),
  extra: X402ExactEvmExtraSchema,
});
export type X402ExactRequirements = z.infer<typeof X402ExactRequirementsSchema>;

/**
 * `payload` of an `exact` EVM PaymentPayload using EIP-3009: the authorization and its signature.
 * x402 types `signature` as optional and allows ERC-6492-wrapped signatures, so any whole-byte hex
 * is accepted here; the settlement engine decides which signatures it can verify.
 */
export const X402ExactEip3009PayloadSchema = z.looseObject({
  authorization: AuthorizationSchema,
  signature: HexSchema,
});
export type X402ExactEip3009Payload = z.infer<typeof X402ExactEip3009PayloadSchema>;

/**
 * `invalidReason` / `errorReason` values Tollgate's facilitator reports: those of x402's `exact` EVM
 * facilitator (`@x402/evm` 2.27.0) where it has one, else the generic codes of the x402 v2
 * specification (§9 Error Handling) and `settlement_pending`, which `@x402/core`'s resource server
 * answers by retrying the settle once.
 */
export const X402ErrorReason = {
  InvalidScheme: "invalid_exact_evm_scheme",
  NetworkMismatch: "invalid_exact_evm_network_mismatch",
  MissingEip712Domain: "invalid_exact_evm_missing_eip712_domain",
  RecipientMismatch: "invalid_exact_evm_recipient_mismatch",
  InvalidSignature: "invalid_exact_evm_signature",
  ValidBeforeExpired: "invalid_exact_evm_payload_authorization_valid_before",
  ValidAfterInFuture: "invalid_exact_evm_payload_authorization_valid_after",
  InvalidAuthorizationValue: "invalid_exact_evm_authorization_value",
  AuthorizationValueMismatch: "invalid_exact_evm_payload_authorization_value_mismatch",
  TransactionFailed: "invalid_exact_evm_transaction_failed",
  NonceAlreadyUsed: "invalid_exact_evm_nonce_already_used",
  InsufficientBalance: "invalid_exact_evm_insufficient_balance",
  SimulationFailed: "invalid_exact_evm_transaction_simulation_failed",
  UnsupportedPayloadType: "unsupported_payload_type",
  TokenNameMismatch: "invalid_exact_evm_token_name_mismatch",
  TokenVersionMismatch: "invalid_exact_evm_token_version_mismatch",
  SettlementPending: "settlement_pending",
  // Generic codes of the x402 v2 specification.
  UnsupportedScheme: "unsupported_scheme",
  InvalidNetwork: "invalid_network",
  InvalidPayload: "invalid_payload",
  InvalidPaymentRequirements: "invalid_payment_requirements",
  InvalidX402Version: "invalid_x402_version",
  UnexpectedVerifyError: "unexpected_verify_error",
  UnexpectedSettleError: "unexpected_settle_error",
} as const;
export type X402ErrorReason = (typeof X402ErrorReason)[keyof typeof X402ErrorReason];
