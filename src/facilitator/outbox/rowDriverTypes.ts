/** The row driver's options and its face (rowDriver.ts); their own file, so the driver's parts share them. */
import type { Logger } from "pino";
import type { Hash, TransactionReceipt } from "viem";
import type { Store } from "../../store/store.ts";
import type { broadcastRaw } from "./broadcastRaw.ts";
import type { FeeHold } from "./feeHold.ts";
import type { GasKey } from "./gasKey.ts";
import type { OutboxRow } from "./outboxRecords.ts";
import type { OutboxHandler, OutboxOutcome, OutboxSigned } from "./outboxTypes.ts";
import type { findRowReceipt } from "./rowReceipts.ts";
import type { WaiterMap } from "./waiterMap.ts";

export type RowDriverClient = Parameters<typeof broadcastRaw>[0] &
  Parameters<typeof findRowReceipt>[0] & {
    waitForTransactionReceipt(args: {
      hash: Hash;
      confirmations: number;
      timeout: number;
      onReplaced: () => void;
    }): Promise<TransactionReceipt>;
  };

/** Test seams for crash tests, called at the named points of a row's life. */
export type OutboxFaults = {
  /** The row is signed and recorded; nothing is broadcast yet. */
  afterSign?: ((row: OutboxRow) => void | Promise<void>) | undefined;
  /** The row is broadcast; its outcome is not recorded yet. */
  afterBroadcast?: ((row: OutboxRow) => void | Promise<void>) | undefined;
  /** A replacement of the row is recorded; it is not broadcast yet. */
  afterReplace?: ((row: OutboxRow) => void | Promise<void>) | undefined;
};

export type RowDriverOptions = {
  store: Store;
  client: RowDriverClient;
  key: GasKey;
  logger: Logger;
  scope: { chainId: number; sender: `0x${string}` };
  handlers: ReadonlyMap<string, OutboxHandler>;
  outcomeWaiters: WaiterMap<OutboxOutcome>;
  hashWaiters: WaiterMap<OutboxSigned>;
  confirmations: number;
  /** How long one wait for a receipt lasts before the row is broadcast again (no bumping). */
  receiptTimeoutMs: number;
  /** How long a broadcast row may sit unmined before it is replaced with a higher fee; `false`: never. */
  bumpAfterMs: number | false;
  /** Delays of the looks for a fresh broadcast's receipt before the wait on new blocks (createOutbox.ts). */
  receiptPollsMs: readonly number[];
  /** The highest `maxFeePerGas` a transaction may offer; `undefined`: no ceiling. */
  maxFeePerGas: bigint | undefined;
  /** The rows waiting for the chain's fee to fall under `maxFeePerGas`. */
  feeHold: FeeHold;
  /** Called after each outcome this worker records (the gas key's runway reads its cost). */
  onOutcome?: ((outcome: OutboxOutcome) => void) | undefined;
  faults: OutboxFaults | undefined;
  /** Drives a row signed here (a nonce filler). */
  track(row: OutboxRow, fresh: boolean): void;
};

export type RowDriver = {
  /** Drives `row` (just signed here when `fresh`) to its outcome and delivers it. */
  drive(row: OutboxRow, fresh: boolean): Promise<void>;
  /** An outcome recorded here lately, so `waitFor` needs no receipt lookup for it. */
  recent(id: number): OutboxOutcome | undefined;
  /** The highest block a receipt has shown: a lower bound for the block a new row lands in. */
  lastSeenBlock(): bigint | undefined;
};
