/**
 * `tollgate/schemes`: the payment-scheme plug-in seam (docs/schemes.md) — the part types, the
 * registry, the built-in schemes and the one pricing type's scheme parts.
 */
export { builtinSchemes } from "./builtinSchemes.ts";
export type { ProofPayment } from "./exact/gate/proofAcceptance.ts";
export { type ExactOffer, exactGate } from "./exact/gate.ts";
export { exactScheme } from "./exact/index.ts";
export { meteredScheme } from "./metered/index.ts";
export { createSchemeRegistry, defineScheme, SchemeIdSchema, type SchemeRegistry } from "./registry.ts";
export { type PlanOffer, planPricing } from "./subscription/gate.ts";
export { subscriptionScheme } from "./subscription/index.ts";
export type {
  ClientPayContext,
  ClientPayment,
  ClientSchemePart,
  FacilitatorCheck,
  FacilitatorScheme,
  FacilitatorSchemeInstance,
  FacilitatorSchemeRequest,
  GateScheme,
  GateSchemeContext,
  GateSchemePart,
  Scheme,
  SchemeAcceptance,
  SchemeCompletion,
  SchemeId,
  SchemeLogger,
  SchemeOffer,
  SchemeOfferEntry,
  SchemePayer,
  SchemePayment,
  SchemePaymentBase,
  SchemePayments,
  SchemeRequest,
  SchemeRoute,
} from "./types.ts";
export { x402ExactScheme } from "./x402Exact/index.ts";
