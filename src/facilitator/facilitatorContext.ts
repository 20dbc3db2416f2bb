/**
 * What every facilitator module and scheme part gets from the facilitator that runs it: the store, the
 * chain, the gas account and its outbox, the settlement engine, the tokens, clock, logger and metrics.
 */
import type { Logger } from "pino";
import type { Address, Chain, PublicClient, Transport } from "viem";
import type { Clock } from "../protocol/clock.ts";
import type { SupportedResponse } from "../protocol/facilitator.ts";
import type { Queryable, Store } from "../store/store.ts";
import type { ContractSigners } from "./contractSigners.ts";
import type { FacilitatorToken } from "./facilitatorToken.ts";
import type { GasAccount } from "./gasAccount.ts";
import type { FacilitatorMetrics } from "./metrics.ts";
import type { Outbox } from "./outbox/outboxTypes.ts";
import type { ProofKey } from "./proofKeys.ts";
import type { SettlementEngine } from "./settlementEngine.ts";
import type { TokenPauseWatch } from "./tokenPauseWatch.ts";

export type FacilitatorContext = {
  store: Store;
  publicClient: PublicClient<Transport, Chain>;
  /** The one account that pays gas; its transactions go through `outbox`. */
  gas: GasAccount;
  /** The transaction outbox every transaction of the gas account goes through (outbox/outboxTypes.ts). */
  outbox: Outbox;
  network: `eip155:${number}`;
  chainId: number;
  batchSettler: Address;
  subscriptionManager: Address | undefined;
  /** TollgateChannels, when this facilitator relays and claims prepaid channels (docs/channels.md). */
  channels: Address | undefined;
  tokens: readonly FacilitatorToken[];
  /**
   * Most blocks one `eth_getLogs` call spans (src/chain/actions/getLogsPaged.ts; default 2 000):
   * providers cap it and refuse wider ranges.
   */
  logsRange?: number | undefined;
  engine: SettlementEngine;
  /**
   * Checks signatures of payers with code (ERC-1271 wallets) through the chain, gas-bounded and with
   * a "has code" cache; for signatures that do not recover to their payer (contractSigners.ts).
   */
  contractSigners: ContractSigners;
  /**
   * Whether a token is paused by its issuer (tokenPauseWatch.ts): workers that move the token hold
   * while it is, and resume when it is unpaused. Absent in contexts built without a facilitator.
   */
  tokenPause?: TokenPauseWatch | undefined;
  proofKeys: () => readonly ProofKey[];
  supported: SupportedResponse;
  clock: Clock;
  logger: Logger;
  metrics: FacilitatorMetrics;
  /**
   * Appends an event to the event log that webhooks and analytics read (docs/facilitator.md). Pass the
   * transaction handle when the event must commit with the change it describes.
   */
  recordEvent(db: Queryable, type: string, data: Record<string, unknown>): Promise<void>;
};
