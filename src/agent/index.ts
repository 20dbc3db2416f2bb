/** `tollgate/agent`: budgets, the subscribe-or-pay policy, paid tools, discovery, specialists, orchestrator (docs/agents.md). */

export {
  createSubscriptionKeeper,
  type SubscriptionAlert,
  type SubscriptionKeeper,
  type SubscriptionKeeperOptions,
  type SyncedSubscription,
} from "../schemes/subscription/agent/createSubscriptionKeeper.ts";
export { facilitatorSubscriptions } from "../schemes/subscription/agent/heldSubscriptions.ts";
export {
  type SubscriptionCommitment,
  subscriptionCommitment,
} from "../schemes/subscription/agent/subscriptionCommitment.ts";
export {
  type SubscriptionWatcher,
  watchSubscriptions,
} from "../schemes/subscription/agent/watchSubscriptions.ts";
export type { BudgetLimits, BudgetLimitsInput } from "./budget/budgetLimits.ts";
export type { BudgetReport } from "./budget/budgetReport.ts";
export { type BudgetLedger, createBudgetLedger, type Reservation } from "./budget/createBudgetLedger.ts";
export {
  type CreateSpecialistOptions,
  createSpecialist,
  type Specialist,
  type SpecialistPlan,
} from "./createSpecialist.ts";
export { agentDashboard } from "./dashboard/agentSection.ts";
export {
  type DiscoveredTool,
  type DiscoverToolsOptions,
  discoverTools,
  fetchManifest,
} from "./discoverTools.ts";
export { capabilityMcpServer } from "./mcp/capabilityMcpServer.ts";
export {
  createMcpConnections,
  type McpConnection,
  type McpConnections,
  type McpServerRef,
  type McpStdioServer,
} from "./mcp/mcpConnections.ts";
export { MCP_MAX_BODY_BYTES, mcpHttpHandler } from "./mcp/mcpHttpHandler.ts";
export { type McpToolCaller, mcpToolFetch } from "./mcp/mcpToolFetch.ts";
export type { SpecialistMcpOptions } from "./mcp/specialistMcp.ts";
export {
  type CreateOrchestratorOptions,
  createOrchestrator,
  type Orchestrator,
  type OrchestratorRun,
} from "./orchestrator/createOrchestrator.ts";
export { modelFromEnv } from "./orchestrator/modelFromEnv.ts";
export type { OrchestratorEvent } from "./orchestrator/orchestratorEvent.ts";
export {
  createUsageMeter,
  type PaidToolOptions,
  type PaidToolReceipt,
  paidTool,
  type RemoteCapability,
} from "./paidTool.ts";
export { createRulePlanner } from "./planner/createRulePlanner.ts";
export {
  type CancelClaims,
  cancelUnneededSubscriptions,
  createCancelClaims,
  createMemoryCancelClaims,
  type HeldSubscriptionSource,
} from "./policy/cancelUnneededSubscriptions.ts";
export { createCallCounter } from "./policy/createCallCounter.ts";
export {
  createDemandHistory,
  createMemoryDemandHistory,
  type DemandHistory,
} from "./policy/createDemandHistory.ts";
export { decide, type PolicyDecision, type PolicyForecast } from "./policy/decide.ts";
export { offerFromPaymentRequired } from "./policy/offerFromPaymentRequired.ts";
export { cancelLeadSeconds, type HeldSubscription, reviewSubscription } from "./policy/reviewSubscription.ts";
export { learnedForecast, runningForecast } from "./policy/runningForecast.ts";
export { createSpendCollector, formatSpendReport, type SpendEvent, type SpendReport } from "./spendReport.ts";
export { type Capability, defineCapability } from "./tools/capability.ts";
export { capabilityTool } from "./tools/capabilityTool.ts";
export {
  type LoadedTool,
  type LoadToolOptions,
  listToolManifests,
  loadTool,
  loadTools,
  readToolManifest,
} from "./tools/loadTool.ts";
export type { LocalToolManifest, RemoteToolManifest, ToolManifest } from "./tools/toolManifest.ts";
