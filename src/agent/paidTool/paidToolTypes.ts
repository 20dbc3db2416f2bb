/** What a paid tool is built from and what it answers (`paidTool`, src/agent/paidTool.ts). */
import type { Logger } from "pino";
import type { z } from "zod";
import type { ReadClient } from "../../chain/clientTypes.ts";
import type { Payer } from "../../client/createPayer.ts";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { BudgetLedger } from "../budget/createBudgetLedger.ts";
import type { OfferListing, PayeePins } from "../offerCheck.ts";
import type { CallCounter } from "../policy/createCallCounter.ts";
import type { DemandHistory } from "../policy/createDemandHistory.ts";
import type { PolicyForecast } from "../policy/decide.ts";
import type { SpendEvent, SpendMode } from "../spendReport.ts";
import type { UsageMeter } from "./usageMeter.ts";

/** A remote capability: where it is served and how it is called. */
export type RemoteCapability = {
  name: string;
  description: string;
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** Absolute URL of the capability. */
  url: string;
  /** JSON Schema of the input object (as in a manifest) or a zod object schema. */
  input: Record<string, unknown> | z.ZodObject;
};

/**
 * A paid tool's options that name no scheme; `PaidToolOptions` (src/agent/paidTool.ts) adds the
 * subscription keeper and the channel wallet, which the schemes' agent parts read.
 */
export type PaidToolCoreOptions = {
  /** The agent whose budget pays. */
  agent: string;
  payer: Payer;
  budget: BudgetLedger;
  fetch?: FetchFn | undefined;
  /** Most one payment may cost (USDC text or smallest units); default: the agent's per-call limit, else 1 USDC. */
  maxPrice?: bigint | string | undefined;
  /** Expected calls of this tool (from the planner); without it the policy uses the break-even rule. */
  forecast?: (() => PolicyForecast | undefined) | undefined;
  /**
   * What the seller listed for this capability (its market catalog entry or manifest): every 402 is
   * held to it (price, plan terms, payTo, network, token) and spends are keyed by its `seller`
   * (docs/budgets.md, "Offers are checked against listings"). Without one, the first payee an origin
   * names is pinned in `payees`.
   */
  listing?: OfferListing | undefined;
  /**
   * Payees pinned per origin for tools without a listing. Default: pinned in the agent's store
   * (`createStoredPayeePins`), so later runs are held to the same payee; `createPayeePins()` for memory.
   */
  payees?: PayeePins | undefined;
  /** Calls already paid once, per provider and plan (shared across an agent's tools). */
  calls?: CallCounter | undefined;
  /**
   * The agent's learned demand (docs/policy.md "Learning"): every call is recorded in it, and the
   * policy decides on the running forecast, with `forecast` as its prior. Share it across tools.
   */
  demand?: DemandHistory | undefined;
  onSpend?: ((event: SpendEvent) => void) | undefined;
  logger?: Pick<Logger, "info" | "warn"> | undefined;
  /** Counts subscribed calls per plan and cycle, to charge metered overage to the budget (share it). */
  meter?: UsageMeter | undefined;
  /**
   * Waits before retrying a call after raising an overage cap (a gate re-reads a subscription it
   * refused at most about once a second). Default: a timer.
   */
  wait?: ((ms: number) => Promise<void>) | undefined;
  /** Time for the meter's cycles and redeemable proofs' expiry (default: the system clock). */
  clock?: Clock | undefined;
  /**
   * A node of the payer's chain. An x402 payment that a seller answered with an error, and did not
   * say it settled, is then held pending and read back from the chain (released if its authorization
   * expires unused, docs/budgets.md); without it such a payment counts as spent.
   */
  chain?: ReadClient | undefined;
};

export type PaidToolReceipt = {
  tool: string;
  mode: SpendMode;
  amount: string;
  provider?: string | undefined;
  transaction?: string | undefined;
  subscriptionId?: string | undefined;
  reason?: string | undefined;
  /** Set when the call failed: the code a model can act on. */
  error?: { code: string; message: string } | undefined;
  /**
   * On a failed call: true when money moved for it anyway (the seller failed after being paid), so
   * `amount` was spent; false when the call was refused before anything was paid.
   */
  paid?: boolean | undefined;
};
