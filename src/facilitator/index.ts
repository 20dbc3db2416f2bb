/** `tollgate/facilitator`: the settlement service as a library (docs/facilitator.md). */

export { authenticating, type RouteAuth, type RouteDoc, routeDoc } from "../http/routeDocs.ts";
export {
  type CreateFacilitatorOptions,
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "./createFacilitator.ts";
export { createLogger } from "./createLogger.ts";
export type { DashboardAgents } from "./dashboard/dashboardModule.ts";
export type { ProviderFrame, ProviderView } from "./dashboard/providerSection.ts";
export type {
  DashboardSectionFactory,
  DashboardSectionHost,
  ProviderViewHost,
  SchemeDashboard,
} from "./dashboard/schemeDashboard.ts";
export { loadFacilitatorConfig } from "./facilitatorConfig.ts";
export type { FacilitatorContext } from "./facilitatorContext.ts";
export type { FacilitatorModule, FacilitatorModuleFactory } from "./facilitatorModule.ts";
export {
  defineFacilitatorScheme,
  type FacilitatorPart,
  type FacilitatorSchemeContext,
  type FacilitatorSchemePart,
} from "./facilitatorSchemeParts.ts";
export { facilitatorSchemes } from "./facilitatorSchemes.ts";
export type { FacilitatorToken } from "./facilitatorToken.ts";
export type { MetricsAccess } from "./metricsAccess.ts";
export { builtinModules } from "./modules.ts";
export { openApiDocumentOf } from "./openApi.ts";
export {
  generateProofKey,
  jwksOf,
  type ProofKey,
  parseProofKey,
  proofKeyFromSeed,
  signPaymentProof,
} from "./proofKeys.ts";
