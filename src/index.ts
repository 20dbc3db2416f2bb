/**
 * Tollgate: HTTP 402 payments for APIs (one-time, subscriptions, metered allowances settled in USDC)
 * and budgeted agents that buy paid tools. Each area also has its own entry point:
 * `tollgate/gate`, `tollgate/client`, `tollgate/agent`, `tollgate/facilitator`, `tollgate/market`,
 * `tollgate/store`, `tollgate/chain`, `tollgate/protocol`.
 */
export {
  createBudgetLedger,
  createOrchestrator,
  createSpecialist,
  discoverTools,
  paidTool,
} from "./agent/index.ts";
export { startDevnet } from "./chain/startDevnet.ts";
export { createPayer, fetchWithPayment, registerProvider } from "./client/index.ts";
export { createFacilitator, serveApp } from "./facilitator/index.ts";
export {
  expressPaymentGate,
  honoPaymentGate,
  nodePaymentGate,
  paymentGate,
  verifyWebhook,
} from "./gate/index.ts";
export { createMarket, createMarketClient, serveMarket } from "./market/index.ts";
export {
  ErrorCode,
  formatUnitsExact,
  isTollgateError,
  parseUnitsExact,
  TollgateError,
} from "./protocol/index.ts";
export { createStore } from "./store/index.ts";
