/** `tollgate/gate`: the resource-server library — `paymentGate`, its adapters and proof checks (docs/gate.md). */

export {
  type CheckPaymentProofContext,
  checkPaymentProof,
  checkSignatureWithFacilitator,
  checkSignatureWithKeys,
  type ProofExpectation,
  type ProofSignatureCheck,
  type ProofVerdict,
  type SignatureVerdict,
} from "../schemes/exact/gate/checkPaymentProof.ts";
export {
  type ParsedPaymentProof,
  parsePaymentProof,
  safeParsePaymentProof,
} from "../schemes/exact/gate/parsePaymentProof.ts";
export {
  createJwksResolver,
  createStaticKeyResolver,
  type JwksResolverOptions,
  type ProofKeyResolver,
} from "../schemes/exact/gate/proofKeyResolver.ts";
export {
  createProofVerifier,
  type ProofChainClient,
  type ProofCheck,
  type ProofVerifier,
  type ProofVerifierOptions,
  verifyPaymentProof,
} from "../schemes/exact/gate/verifyPaymentProof.ts";
export type { ExactOffer as OneTimeOffer } from "../schemes/exact/gate.ts";
export type {
  AllowanceDeduction,
  GateSubscription,
} from "../schemes/subscription/gate/createSubscriptionGate.ts";
export { deductAllowance } from "../schemes/subscription/gate/deductAllowance.ts";
export {
  createLeasedUsageLedger,
  type LeasedUsageLedger,
  type LeasedUsageLedgerOptions,
} from "../schemes/subscription/gate/usage/createLeasedUsageLedger.ts";
export { createMemoryUsageLedger } from "../schemes/subscription/gate/usage/createMemoryUsageLedger.ts";
export { createPostgresUsageLedger } from "../schemes/subscription/gate/usage/createPostgresUsageLedger.ts";
export {
  createRedisUsageLedger,
  type RedisUsageLedgerOptions,
} from "../schemes/subscription/gate/usage/createRedisUsageLedger.ts";
export type { SharedUsageLedger } from "../schemes/subscription/gate/usage/usageLeases.ts";
export type { UsageLedger } from "../schemes/subscription/gate/usage/usageLedger.ts";
export type { ServedSubscription } from "../schemes/types.ts";
export {
  createX402Settlement,
  type X402GatePayment,
  x402Requirements,
} from "../schemes/x402Exact/gate/x402Settlement.ts";
export { type Amount, AmountSchema } from "./amount.ts";
export { buildPaymentRequired } from "./buildPaymentRequired.ts";
export {
  type BuiltPaymentRequired,
  composePaymentRequired,
  type PaymentRequiredParams,
  paymentRequiredResponse,
} from "./composePaymentRequired.ts";
export { expressPaymentGate } from "./expressPaymentGate.ts";
export { type GateContext, runInGateContext } from "./gateContext.ts";
export type { GateLogger } from "./gateLogger.ts";
export type { GateRequest, RouteRequest } from "./gateRequest.ts";
export { honoPaymentGate, type PaymentGateEnv } from "./honoPaymentGate.ts";
export {
  type McpCaller,
  type McpCompleteCall,
  type McpGateCall,
  type McpGateResult,
  type McpPaymentGate,
  type McpToolResult,
  mcpPaymentGate,
} from "./mcp/mcpPaymentGate.ts";
export {
  issueMemo,
  type MemoSecret,
  memoSecretOf,
  memoSecretWeakness,
  type OpenedMemo,
  openMemo,
  PUBLISHED_MEMO_SECRETS,
  sealMemo,
} from "./memo.ts";
export { type NodeGatedHandler, type NodePaymentGateOptions, nodePaymentGate } from "./nodePaymentGate.ts";
export {
  type NormalizedTarget,
  normalizeRequestTarget,
  type RequestTargetReading,
  targetRefusal,
} from "./normalizeRequestTarget.ts";
export {
  type GatePayment,
  type GateResult,
  type PaymentGate,
  type PaymentGateControls,
  type PaymentRequiredRequest,
  PaymentRequiredRequestSchema,
  paymentGate,
} from "./paymentGate.ts";
export {
  type PaymentGateOptions,
  PaymentGateOptionsSchema,
  type Price,
  PriceTextSchema,
  type PricingEntry,
  PricingEntrySchema,
  type RouteConfig,
  RouteConfigSchema,
  type RouteResolver,
} from "./paymentGateOptions.ts";
export { compileRoutePattern, type RoutePattern } from "./routePattern.ts";
export {
  type VerifyWebhookOptions,
  verifyWebhook,
  type WebhookHeaders,
  type WebhookRefusal,
  WebhookVerificationError,
} from "./verifyWebhook.ts";
