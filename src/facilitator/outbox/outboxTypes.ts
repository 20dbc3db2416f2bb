/**
 * The facilitator's transaction outbox, as its producers see it (docs/facilitator.md, "The transaction
 * outbox"). Every transaction the gas account sends — settlement batches, usage deductions, renewals,
 * relayed subscription calls, channel claims — is a row here, and one worker signs, records,
 * broadcasts and reconciles them all under one nonce manager.
 *
 * A producer:
 * 1. registers a handler for its kind once: `outbox.handle("usage", handler)`;
 * 2. enqueues calls inside its own store transaction, so the call commits with the producer's rows
 *    (`await outbox.enqueue(tx, { kind: "usage", owner: String(batchId), ...deductCall })`), then calls
 *    `outbox.wake()` after that transaction commits;
 * 3. learns the outcome in its handler, which runs exactly once per call across crashes and instances:
 *    its `commit(apply)` runs `apply` in the store transaction that marks the row final. A handler may
 *    read the chain before committing; if it throws, the row stays open and the outcome is delivered
 *    again later.
 *
 * Outcomes: `confirmed` (mined, status success: per-item results are in `logs`), `reverted` (mined,
 * nothing happened: the owner splits or retries its items), `dropped` (never mined: its account nonce
 * went to another transaction — `displaced` — or the node refused it for good — `refused`; the owner
 * reads what happened from the chain, searching logs from `fromBlock`).
 */
import type { Address, Hash, Log } from "viem";
import type { TxCall } from "../../chain/actions/txCall.ts";
import type { Queryable, Store } from "../../store/store.ts";
import type { FeeHoldState } from "./feeHold.ts";

export type { TxCall } from "../../chain/actions/txCall.ts";

/** What a producer asks the outbox to send: a call (from a `chain/actions` `*Call` builder) and who owns it. */
export type OutboxRequest = TxCall & {
  /** The producer's handler kind (`settlement`, `usage`, `renewal`, `relay`, `channel-claim`, …). */
  kind: string;
  /** The producer's reference (a batch id, say), handed back with the outcome. At most 200 characters. */
  owner: string;
  /** JSON the handler needs with the outcome (kept with the row). */
  meta?: Record<string, unknown> | undefined;
};

/** The states of an outbox row; the last three are final. */
export type OutboxStatus = "queued" | "signed" | "broadcast" | "confirmed" | "reverted" | "dropped";

type OutcomeBase = {
  /** The outbox row. */
  id: number;
  kind: string;
  owner: string;
  meta: Record<string, unknown> | null;
  /** A block at or before the one the transaction could land in (read before signing). */
  fromBlock: bigint | null;
  /** What the mined transaction cost the gas key, in wei (rowReceipts.ts); absent when none was mined. */
  feePaid?: bigint | undefined;
};

/** How a call ended. */
export type OutboxOutcome = OutcomeBase &
  (
    | { status: "confirmed"; hash: Hash; blockNumber: bigint; blockHash?: Hash | undefined; logs: Log[] }
    | { status: "reverted"; hash: Hash; blockNumber: bigint; blockHash?: Hash | undefined }
    | { status: "dropped"; reason: "displaced" | "refused"; message: string; hash: Hash | null }
  );

/**
 * Runs `apply` in the store transaction that records the row's outcome; resolves `false` (without
 * running `apply`) when another worker recorded it first.
 */
export type OutboxCommit = (apply: (db: Queryable) => Promise<void>) => Promise<boolean>;

/** A producer's outcome handler; see the module comment. */
export type OutboxHandler = (outcome: OutboxOutcome, commit: OutboxCommit) => Promise<void>;

/** A confirmed row whose transaction a reorganisation took off the canonical chain (confirmedRowWatch.ts). */
export type ReopenedRow = {
  /** The outbox row. */
  id: number;
  kind: string;
  owner: string;
  meta: Record<string, unknown> | null;
  /** The undone transaction. */
  hash: Hash;
  /** The block it was mined in before. */
  blockNumber: bigint;
};

/**
 * A producer's reopen hook: runs in the one store transaction that has just moved the row `confirmed` →
 * `broadcast` (a compare-and-set; only the instance that won it runs the hook). It undoes, with
 * compare-and-set writes, what the kind's handler recorded from the undone receipt, so the handler can
 * record the re-sent transaction's receipt as a first outcome. Throwing rolls the whole reopen back (the
 * row stays confirmed and is found again). No chain calls inside.
 */
export type OutboxReopenHook = (tx: Queryable, row: ReopenedRow) => Promise<void>;

/** A row's progress as `waitForHash` sees it. */
export type OutboxSigned = { id: number; hash: Hash; nonce: number };

export type Outbox = {
  /** The store the rows live in. */
  readonly store: Store;
  /** The gas account that signs every row. */
  readonly sender: Address;
  /**
   * Queues a call; pass the producer's transaction handle so it commits with the producer's rows.
   * Returns the row id. Call `wake()` once the transaction has committed.
   */
  enqueue(db: Queryable, request: OutboxRequest): Promise<number>;
  /**
   * Runs `work` in one store transaction in which `enqueue` queues each call *signed*: it takes the gas
   * key's next nonce in that transaction and records the signed bytes with the producer's rows, so no
   * second transaction signs it (a settlement batch is claimed and signed in one commit). Once the
   * transaction commits, this worker broadcasts the rows at once (no `wake()` needed); when it rolls
   * back, nothing was signed. The gas key's nonce row stays locked from the first `enqueue` to the
   * commit: keep the work after it short.
   */
  signingTransaction<T>(
    work: (tx: Queryable, enqueue: (request: OutboxRequest) => Promise<number>) => Promise<T>,
  ): Promise<T>;
  /** Tells the worker new rows are committed (in process; PostgreSQL LISTEN/NOTIFY can call it too). */
  wake(): void;
  /** Registers the handler of a kind; a later registration of the same kind replaces it. */
  handle(kind: string, handler: OutboxHandler): void;
  /**
   * Registers the reopen hook of a kind: its confirmed rows are then watched for a reorganisation
   * (confirmedRowWatch.ts) and, once their transaction left the chain, reopened with the hook and their
   * recorded bytes broadcast again; the kind's handler receives the new outcome. Kinds without a hook
   * are not watched. A later registration of the same kind replaces it.
   */
  onReorg(kind: string, hook: OutboxReopenHook): void;
  /**
   * Resolves with the row's outcome once recorded (by this worker or another instance's). When the
   * worker is not running, drives the outbox itself meanwhile. Rejects with the error of a failed
   * attempt made here (the row stays open and is retried).
   */
  waitFor(id: number): Promise<OutboxOutcome>;
  /** Resolves once the row is signed and recorded and this worker has broadcast it. */
  waitForHash(id: number): Promise<OutboxSigned>;
  /** Signs what is queued and drives every open row of a registered kind to its outcome, now. */
  flush(): Promise<void>;
  /** Rows of this worker waiting for the chain's fee to fall under the maximum fee (feeHold.ts). */
  feeHold(): FeeHoldState | undefined;
  start(): Promise<void>;
  stop(): Promise<void>;
};
