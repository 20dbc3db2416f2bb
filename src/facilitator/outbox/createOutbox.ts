/**
 * The transaction outbox's worker: sign → record → broadcast → reconcile, for every transaction of one
 * gas key (outboxTypes.ts for the producer's side, docs/facilitator.md for the states).
 *
 * Invariants:
 * 1. A row is signed in the store transaction that takes its nonce (the gas key's `tx_senders` row is
 *    locked, queued rows are claimed with `FOR UPDATE SKIP LOCKED`), and its raw bytes and hash commit
 *    before it is broadcast. Nothing is ever broadcast that is not recorded.
 * 2. A signed row is never signed again with other contents: after a crash, or in another instance, it
 *    is looked up by its hashes and broadcast again with its recorded bytes. The one re-signing is a fee
 *    bump (rowDriver.ts): the same call at the same nonce with higher fees, when it sits unmined for
 *    `bumpAfterMs`; the replaced hash is kept, and whichever transaction is mined is the outcome.
 * 3. An outcome comes from a receipt of one of the row's hashes; or, when the row's nonce went to another
 *    transaction, it is `dropped`/`displaced`; or, when the node refuses the bytes for good, `dropped`/
 *    `refused` and its nonce is filled by a zero-value transfer to self so later rows are not stuck.
 * 4. The outcome is recorded (compare-and-set on the row's status) in the store transaction of its
 *    producer's handler: exactly one worker delivers it, once.
 * 5. This worker drives rows it signed, and rows no worker has touched for `staleMs` (all open rows when
 *    it starts): a live instance refreshes its rows while it waits for their receipts.
 * 6. A chain that lost recorded transactions (restored from an older state, a deep reorg, a dropped
 *    mempool) gets them again from their recorded bytes, in nonce order (rewindRepair.ts). The check
 *    costs two RPC calls and runs when a whole block was mined after a row's broadcast without it
 *    (the head read at most once a second, and only while a row has waited a second), at most once per
 *    block; when a row waits for its receipt longer than `stuckAfterMs`, at most once per
 *    `stuckAfterMs`; and once when the chain comes back.
 *
 * Parts: signing (signQueuedRows.ts), driving one row (rowDriver.ts) and the rows driven here
 * (rowTracker.ts), the loop and its passes (outboxPasses.ts: reconcile → sign → track → heartbeat), the
 * lost-transaction check (rewindCheck.ts), the reorganisation watch's loop (reorgWatchLoop.ts), waiting
 * on rows (outboxWaits.ts); createOutbox composes them into the producer's side (outboxTypes.ts).
 */
import type { Logger } from "pino";
import type { Address, PublicClient } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import { IDLE_BACKSTOP_MS } from "../wakeablePause.ts";
import { type ConfirmedRowWatch, createConfirmedRowWatch } from "./confirmedRowWatch.ts";
import { createFeeHold, type FeeHold } from "./feeHold.ts";
import type { GasKey } from "./gasKey.ts";
import { createOutboxPasses, type OutboxPasses } from "./outboxPasses.ts";
import { insertOutboxRow } from "./outboxRecords.ts";
import type {
  Outbox,
  OutboxHandler,
  OutboxOutcome,
  OutboxReopenHook,
  OutboxRequest,
  OutboxSigned,
} from "./outboxTypes.ts";
import { type OutboxWaitDeps, waitForOutcome, waitForSigned } from "./outboxWaits.ts";
import { createReorgWatchLoop, type ReorgWatchLoop } from "./reorgWatchLoop.ts";
import { createRewindCheck } from "./rewindCheck.ts";
import { createRowDriver } from "./rowDriver.ts";
import type { OutboxFaults, RowDriver, RowDriverOptions } from "./rowDriverTypes.ts";
import { FILLER_KIND } from "./rowOutcomes.ts";
import { createRowTracker, type RowTracker } from "./rowTracker.ts";
import { signInTransaction } from "./signQueuedRows.ts";
import { createWaiterMap, type WaiterMap } from "./waiterMap.ts";

export type { OutboxFaults } from "./rowDriverTypes.ts";
export { FILLER_KIND } from "./rowOutcomes.ts";

export type OutboxClient = Pick<
  PublicClient,
  | "sendRawTransaction"
  | "getTransactionReceipt"
  | "waitForTransactionReceipt"
  | "getBlockNumber"
  | "getTransactionCount"
  | "getBlock"
> & {
  /** viem's polling interval of the client (ms): sets the default `receiptPollsMs`. */
  readonly pollingInterval?: number | undefined;
};

export type OutboxOptions = {
  store: Store;
  client: OutboxClient;
  key: GasKey;
  clock: Clock;
  logger: Logger;
  /** Confirmations before an outcome is recorded (default 1). */
  confirmations?: number | undefined;
  /**
   * While rows are in flight (or the chain is away), how often open rows left by a crash or another
   * instance are looked for (default 1000 ms).
   */
  reconcileIntervalMs?: number | undefined;
  /**
   * With nothing in flight, how long the worker sleeps before it looks anyway (default 30 s): a row
   * enqueued here wakes it at once (`wake`). While rows another worker signed are open (found on a
   * pass, or after the store's `outbox` notification of a row enqueued elsewhere), it looks every
   * `reconcileIntervalMs`, so it drives them once they are stale if their worker died.
   */
  idlePollMs?: number | undefined;
  /** A row no worker has touched for this long is driven by whoever finds it (default 5000 ms). */
  staleMs?: number | undefined;
  /**
   * How long one wait for a receipt lasts before the row is broadcast again (default 120 000 ms), when
   * fee bumps are off.
   */
  receiptTimeoutMs?: number | undefined;
  /**
   * How long a broadcast row may sit unmined before it is replaced, same nonce, with a fee at least
   * 12.5 % higher (default 30 000 ms; `false`: never, the row is broadcast again as it is).
   */
  bumpAfterMs?: number | false | undefined;
  /**
   * The highest `maxFeePerGas` a transaction may offer (smallest unit per gas; default: none). Give the
   * key the same (`createGasKey`), so new transactions stay under it too. A row the chain's fee keeps
   * above it waits, unmined and counted in `feeHold()`, until the base fee falls.
   */
  maxFeePerGas?: bigint | undefined;
  /**
   * How long a row may wait for its receipt before the worker asks whether the chain lost transactions
   * it recorded (default 6 000 ms, three blocks of a 2-second chain; rewindRepair.ts). Also the least
   * time between two such checks, each two RPC calls. On a chain with slow blocks, set it to a few of
   * them. Independently, a row passed over by a whole block (the head moved more than `confirmations`
   * past the block known when it was broadcast) asks at once, at most once per block.
   */
  stuckAfterMs?: number | undefined;
  /**
   * Looks for a just-broadcast transaction's receipt at these delays (ms, each after the previous
   * look) before waiting on new blocks. A node that mines on demand (anvil's automine) answers the
   * send before the block is sealed, and sealing takes longer as its chain grows (2 ms at block 250,
   * 9 ms at block 2 000 here): without these looks each such transaction waited a whole polling
   * interval. Default: 0 and then doubling from 2 ms while the delays fit in the client's polling
   * interval, when that is at most 250 ms (a devnet, or a fast chain polled fast) — `[0, 2, 4, 8, 16]`
   * at 50 ms; none above 250 ms, where a block is not expected within a few milliseconds. Skipped when
   * more than one confirmation is asked for.
   */
  receiptPollsMs?: readonly number[] | undefined;
  /** Rows signed per pass (default 64). */
  maxSignPerPass?: number | undefined;
  /** Called after each outcome this worker records (the gas key's runway, gasRunway.ts). */
  onOutcome?: ((outcome: OutboxOutcome) => void) | undefined;
  /** Called for each confirmed row a reorganisation undid and this worker reopened, by kind. */
  onReopened?: ((kind: string) => void) | undefined;
  /**
   * Confirmed rows of a kind with a reopen hook (`onReorg`) mined within this many blocks of the head
   * are watched for a reorganisation that undoes them (confirmedRowWatch.ts; default 64, at least
   * `confirmations`).
   */
  reorgWindowBlocks?: number | undefined;
  /** How often the rows of that window are compared with the chain while any is in it (default 2 000 ms). */
  reorgCheckIntervalMs?: number | undefined;
  faults?: OutboxFaults | undefined;
};

/**
 * Creates the outbox of one gas key over one store.
 * @example
 * const outbox = createOutbox({ store, client: publicClient, key, clock, logger });
 * outbox.handle("usage", async (outcome, commit) => { await commit((tx) => markDeductions(tx, outcome)); });
 * await outbox.start();
 */
export function createOutbox(options: OutboxOptions): Outbox {
  const { store, client, key } = options;
  const parts = createOutboxParts(options);
  const { handlers, reopenHooks, driver, tracker, passes, watch } = parts;
  let unlisten: (() => Promise<void>) | undefined;
  const waits: OutboxWaitDeps = {
    store,
    client,
    outcomeWaiters: parts.outcomeWaiters,
    hashWaiters: parts.hashWaiters,
    running: () => passes.running,
    hasHandler: (kind) => handlers.has(kind),
    recent: (id) => driver.recent(id),
    inFlight: (id) => tracker.inFlight.get(id),
    wake: () => passes.wake(false),
    flush: () => passes.flush(),
    signAndSend: () => passes.signAndSend(),
  };
  function checkKind(request: OutboxRequest): void {
    if (!handlers.has(request.kind)) {
      throw new TypeError(`register a handler for outbox kind "${request.kind}" before enqueueing it`);
    }
  }
  return {
    store,
    sender: key.address,
    async signingTransaction(work) {
      const { result, signed } = await signInTransaction(
        { store, key, scope: parts.scope, check: checkKind, fromBlock: parts.fromBlock },
        work,
      );
      for (const row of signed) tracker.track(row, true);
      return result;
    },
    async enqueue(db, request) {
      checkKind(request);
      const id = await insertOutboxRow(db, parts.scope, request);
      if (db === store) this.wake();
      return id;
    },
    wake: () => passes.wake(true),
    handle(kind, handler) {
      handlers.set(kind, handler);
    },
    onReorg(kind, hook) {
      reopenHooks.set(kind, hook);
      watch.due();
    },
    waitFor: (id) => waitForOutcome(waits, id),
    waitForHash: (id) => waitForSigned(waits, id),
    flush: () => passes.flush(),
    feeHold: () => parts.feeHold.state(),
    async start() {
      if (passes.running) return;
      passes.open();
      unlisten = await store.listen("outbox", () => passes.checkLater());
      passes.run();
      watch.start();
    },
    async stop() {
      passes.halt();
      watch.wake();
      await passes.done();
      await watch.done();
      await Promise.allSettled([...tracker.inFlight.values()]);
      passes.clearLater();
      await unlisten?.();
      unlisten = undefined;
    },
  };
}

/** The outbox's parts, each with its own state; see the module comment. */
type OutboxParts = {
  scope: { chainId: number; sender: Address };
  handlers: Map<string, OutboxHandler>;
  reopenHooks: Map<string, OutboxReopenHook>;
  feeHold: FeeHold;
  outcomeWaiters: WaiterMap<OutboxOutcome>;
  hashWaiters: WaiterMap<OutboxSigned>;
  driver: RowDriver;
  tracker: RowTracker;
  passes: OutboxPasses;
  watch: ReorgWatchLoop;
  /** The block a row signed now is known to land in at the earliest. */
  fromBlock: () => Promise<bigint>;
};

function createOutboxParts(options: OutboxOptions): OutboxParts {
  const { store, client, key, clock } = options;
  const log = options.logger.child({ component: "outbox" });
  const scope = { chainId: key.chainId, sender: key.address };
  const confirmations = options.confirmations ?? 1;
  const idlePollMs = options.idlePollMs ?? IDLE_BACKSTOP_MS;
  const handlers = new Map<string, OutboxHandler>([[FILLER_KIND, async () => {}]]);
  const kinds = () => [...handlers.keys()];
  const reopenHooks = new Map<string, OutboxReopenHook>();
  const feeHold = createFeeHold({ ceiling: options.maxFeePerGas ?? key.maxFeePerGas, clock, logger: log });
  const outcomeWaiters = createWaiterMap<OutboxOutcome>();
  const hashWaiters = createWaiterMap<OutboxSigned>();
  const fromBlock = async () => driver.lastSeenBlock() ?? (await client.getBlockNumber());
  /** What the loop's parts all read. */
  const base = { store, key, scope, clock, log };
  const rewind = createRewindCheck({
    ...base,
    client,
    feeHold,
    confirmations,
    stuckAfterMs: options.stuckAfterMs ?? 6_000,
    lastSeenBlock: () => driver.lastSeenBlock(),
    track: (row) => void tracker.track(row, false),
  });
  const tracker = createRowTracker({
    log,
    drive: (row, fresh) => driver.drive(row, fresh),
    rewind,
    feeHold,
    outcomeWaiters,
    hashWaiters,
    // An outcome of a kind with a reopen hook may be in the reorganisation watch's window now.
    finished: (kind) => reopenHooks.has(kind) && watch.due(),
    failed: () => passes.wake(false),
  });
  const watch = createReorgWatchLoop({
    store,
    scope,
    log,
    watch: confirmedRowWatchFor(options, scope, reopenHooks, confirmations),
    intervalMs: options.reorgCheckIntervalMs ?? 2_000,
    idlePollMs,
    kinds,
    running: () => passes.running,
    inFlight: (id) => tracker.inFlight.has(id),
    track: (row) => void tracker.track(row, false),
  });
  const driver = createRowDriver({
    ...rowDriverOptions(options, confirmations),
    logger: log,
    scope,
    handlers,
    outcomeWaiters,
    hashWaiters,
    feeHold,
    track: (row, fresh) => void tracker.track(row, fresh),
  });
  const passes = createOutboxPasses({
    ...base,
    tracker,
    rewind,
    kinds,
    fromBlock,
    maxSignPerPass: options.maxSignPerPass ?? 64,
    staleMs: options.staleMs ?? 5_000,
    reconcileIntervalMs: options.reconcileIntervalMs ?? 1_000,
    idlePollMs,
  });
  return {
    scope,
    handlers,
    reopenHooks,
    feeHold,
    outcomeWaiters,
    hashWaiters,
    driver,
    tracker,
    passes,
    watch,
    fromBlock,
  };
}

/** The row driver's options that come from the outbox's options as they are (or their defaults). */
function rowDriverOptions(options: OutboxOptions, confirmations: number) {
  const { store, client, key } = options;
  return {
    store,
    client,
    key,
    confirmations,
    receiptTimeoutMs: options.receiptTimeoutMs ?? 120_000,
    bumpAfterMs: options.bumpAfterMs ?? 30_000,
    receiptPollsMs: options.receiptPollsMs ?? receiptPollsFor(client.pollingInterval),
    maxFeePerGas: options.maxFeePerGas ?? key.maxFeePerGas,
    onOutcome: options.onOutcome,
    faults: options.faults,
  } satisfies Partial<RowDriverOptions>;
}

/** The watch of confirmed rows of the kinds with a reopen hook (confirmedRowWatch.ts). */
function confirmedRowWatchFor(
  options: OutboxOptions,
  scope: { chainId: number; sender: Address },
  hooks: ReadonlyMap<string, OutboxReopenHook>,
  confirmations: number,
): ConfirmedRowWatch {
  return createConfirmedRowWatch({
    store: options.store,
    client: options.client,
    scope,
    logger: options.logger,
    hooks,
    onReopened: options.onReopened,
    windowBlocks: Math.max(options.reorgWindowBlocks ?? 64, confirmations),
  });
}

/** The default `receiptPollsMs` for a client polling every `pollingInterval` ms. Exported for its test. */
export function receiptPollsFor(pollingInterval: number | undefined): number[] {
  if (pollingInterval === undefined || pollingInterval > 250) return [];
  const delays = [0];
  let total = 0;
  for (let delay = 2; total + delay < pollingInterval; delay *= 2) {
    delays.push(delay);
    total += delay;
  }
  return delays;
}
