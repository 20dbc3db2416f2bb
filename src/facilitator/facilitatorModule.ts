/**
 * How the facilitator's features plug in. Settlement is the core; subscriptions, usage, webhooks,
 * analytics and x402 are modules: each gets the shared context, may mount routes and may run a
 * background worker that the facilitator starts and stops with itself.
 */
import type { Hono } from "hono";
import type { Logger } from "pino";
import type { Address, Chain, PublicClient, Transport } from "viem";
import type { Clock } from "../protocol/clock.ts";
import type { SupportedResponse } from "../protocol/facilitator.ts";
import type { Queryable, Store } from "../store/store.ts";
import type { FacilitatorToken } from "./createFacilitator.ts";
import type { GasAccount } from "./gasAccount.ts";
import type { FacilitatorMetrics } from "./metrics.ts";
import type { ProofKey } from "./proofKeys.ts";
import type { SettlementEngine } from "./settlementEngine.ts";

export type FacilitatorContext = {
  store: Store;
  publicClient: PublicClient<Transport, Chain>;
  /** The one account that pays gas; take nonces only through it. */
  gas: GasAccount;
  network: `eip155:${number}`;
  chainId: number;
  batchSettler: Address;
  subscriptionManager: Address | undefined;
  tokens: readonly FacilitatorToken[];
  engine: SettlementEngine;
  proofKeys: () => readonly ProofKey[];
  supported: SupportedResponse;
  clock: Clock;
  logger: Logger;
  metrics: FacilitatorMetrics;
  /**
   * Appends an event to the event log that webhooks and analytics read (DESIGN.md §4). Pass the
   * transaction handle when the event must commit with the change it describes.
   */
  recordEvent(db: Queryable, type: string, data: Record<string, unknown>): Promise<void>;
};

export type FacilitatorModule = {
  name: string;
  routes?(app: Hono): void;
  start?(): Promise<void>;
  stop?(): Promise<void>;
};

export type FacilitatorModuleFactory = (context: FacilitatorContext) => FacilitatorModule;
