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
 * Parts: signing (signQueuedRows.ts), driving one row (rowDriver.ts), waiting on rows (outboxWaits.ts),
 * and here the passes that tie them together (sign → track → reconcile → heartbeat).
 */
import type { Logger } from "pino";
import type { PublicClient } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import { isChainUnreachable } from "../chainErrors.ts";
import { createWakeablePause, IDLE_BACKSTOP_MS } from "../wakeablePause.ts";
import { createConfirmedRowWatch } from "./confirmedRowWatch.ts";
import { createFeeHold } from "./feeHold.ts";
import type { GasKey } from "./gasKey.ts";
import { insertOutboxRow, type OutboxRow, openOutboxRows, touchRows } from "./outboxRecords.ts";
import type {
  Outbox,
  OutboxHandler,
  OutboxOutcome,
  OutboxReopenHook,
  OutboxRequest,
  OutboxSigned,
} from "./outboxTypes.ts";
import { type OutboxWaitDeps, waitForOutcome, waitForSigned } from "./outboxWaits.ts";
import { repairRewind } from "./rewindRepair.ts";
import { createRowDriver, FILLER_KIND, type OutboxFaults } from "./rowDriver.ts";
import { signInTransaction, signQueuedRows } from "./signQueuedRows.ts";
import { createWaiterMap } from "./waiterMap.ts";

export { FILLER_KIND, type OutboxFaults } from "./rowDriver.ts";

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
  const { store, client, key, clock } = options;
  const log = options.logger.child({ component: "outbox" });
  const scope = { chainId: key.chainId, sender: key.address };
  const confirmations = options.confirmations ?? 1;
  const reconcileIntervalMs = options.reconcileIntervalMs ?? 1_000;
  const staleMs = options.staleMs ?? 5_000;
  const receiptTimeoutMs = options.receiptTimeoutMs ?? 120_000;
  const maxSignPerPass = options.maxSignPerPass ?? 64;
  const idlePollMs = options.idlePollMs ?? IDLE_BACKSTOP_MS;
  const stuckAfterMs = options.stuckAfterMs ?? 6_000;
  let unlisten: (() => Promise<void>) | undefined;
  let laterCheck: ReturnType<typeof setTimeout> | undefined;
  /**
   * A row was enqueued on the store (here or by another worker): look again after `reconcileIntervalMs`.
   * Not at once: the worker that enqueued it signs it; this one only watches it in case that one dies.
   */
  function checkLater(): void {
    if (laterCheck !== undefined) return;
    laterCheck = setTimeout(() => {
      laterCheck = undefined;
      sleeper.wake();
    }, reconcileIntervalMs);
    laterCheck.unref?.();
  }

  /** Whether rows of this key that this worker does not drive are open (another worker's, or a dead one's). */
  async function othersOpen(): Promise<boolean> {
    const rows = await store.query<{ id: string }>(
      `SELECT id FROM tx_outbox WHERE status IN ('signed', 'broadcast') AND chain_id = $1 AND sender = $2
       ORDER BY id LIMIT 256`,
      [scope.chainId, scope.sender.toLowerCase()],
    );
    return rows.some((row) => !inFlight.has(Number(row.id)));
  }

  const handlers = new Map<string, OutboxHandler>([[FILLER_KIND, async () => {}]]);
  const reopenHooks = new Map<string, OutboxReopenHook>();
  const reorgWatch = createConfirmedRowWatch({
    store,
    client,
    scope,
    logger: options.logger,
    hooks: reopenHooks,
    onReopened: options.onReopened,
    windowBlocks: Math.max(options.reorgWindowBlocks ?? 64, confirmations),
  });
  const reorgCheckIntervalMs = options.reorgCheckIntervalMs ?? 2_000;
  const watchSleeper = createWakeablePause();
  let watchDone: Promise<void> | undefined;
  /** Confirmed rows may be in the watch's window: set at start and by every outcome recorded here. */
  let watchDue = true;

  /**
   * Compares recently confirmed rows with the chain every `reorgCheckIntervalMs` while any is in the
   * window; with none, it sleeps until an outcome is recorded here, or `idlePollMs` (one store read, for
   * outcomes another instance recorded).
   */
  async function watchLoop(): Promise<void> {
    let failing = false;
    while (running) {
      try {
        const { reopened, watching } = await reorgWatch.check();
        watchDue = watching;
        failing = false;
        if (reopened.length > 0) {
          for (const row of await openOutboxRows(store, scope, [...handlers.keys()], undefined)) {
            if (reopened.includes(row.id) && !inFlight.has(row.id)) track(row, false);
          }
        }
      } catch (error) {
        if (!failing) log.warn({ err: error }, "reorganisation watch failed; it will be retried");
        failing = true;
      }
      if (!running) break;
      if (watchDue || failing) await watchSleeper.pause(reorgCheckIntervalMs);
      else await watchSleeper.pause(idlePollMs);
    }
  }
  const inFlight = new Map<number, Promise<void>>();
  /**
   * Each row in flight: when this worker began driving it (`since`), and the newest block known then
   * (`fromBlock`): the head read last, the newest receipt's, or the block the row was signed at
   * (`undefined`: none known; the first head read gives it one). Any of them may be a block behind the
   * chain, so the row may have reached the node only in time for the block after it: a head more than
   * `confirmations` past it without the row's outcome means a whole block was mined without the row. A
   * nearer head could be a receipt not fetched yet, and would cost a check that finds nothing.
   */
  const driving = new Map<number, { since: number; fromBlock: bigint | undefined }>();
  /** The chain's head as last read for the lost-transaction check, and when. */
  let head: bigint | undefined;
  let headReadAt = 0;
  /** The head at the last lost-transaction check: one check per block at most. */
  let headChecked: bigint | undefined;
  const feeHold = createFeeHold({ ceiling: options.maxFeePerGas ?? key.maxFeePerGas, clock, logger: log });
  const outcomeWaiters = createWaiterMap<OutboxOutcome>();
  const hashWaiters = createWaiterMap<OutboxSigned>();
  const sleeper = createWakeablePause();
  let running = false;
  let dirty = false;
  let loopDone: Promise<void> | undefined;
  /** The first reconcile of this worker takes every open row, stale or not (a restart). */
  let reconciledOnce = false;
  let lastReconcile = 0;
  let lastTouch = 0;
  let signing: Promise<unknown> = Promise.resolve();
  let chainDown = false;
  let lastRewindCheck = 0;
  /** The chain was unreachable and answers again: it may be a node restarted from an older state. */
  let rewindCheckDue = false;
  let repairing: Promise<void> | undefined;

  function setChainDown(down: boolean): void {
    if (chainDown && !down) rewindCheckDue = true;
    chainDown = down;
  }

  const driver = createRowDriver({
    store,
    client,
    key,
    logger: log,
    scope,
    handlers,
    outcomeWaiters,
    hashWaiters,
    confirmations,
    receiptTimeoutMs,
    bumpAfterMs: options.bumpAfterMs ?? 30_000,
    receiptPollsMs: options.receiptPollsMs ?? receiptPollsFor(client.pollingInterval),
    maxFeePerGas: options.maxFeePerGas ?? key.maxFeePerGas,
    feeHold,
    onOutcome: options.onOutcome,
    faults: options.faults,
    track: (row, fresh) => void track(row, fresh),
  });

  /**
   * A producer said rows were committed (`wake`) since the last signing pass began: that pass need
   * not look first whether any is queued.
   */
  let committed = false;

  /** Signs queued rows, one pass at a time (signQueuedRows.ts). */
  function signQueued(): Promise<OutboxRow[]> {
    const run = () => {
      const told = committed;
      committed = false;
      return signQueuedRows({
        store,
        key,
        scope,
        kinds: [...handlers.keys()],
        limit: maxSignPerPass,
        fromBlock: async () => driver.lastSeenBlock() ?? (await client.getBlockNumber()),
        knownQueued: told,
      });
    };
    const result = signing.then(run, run);
    signing = result.catch(() => undefined);
    return result;
  }

  /** Drives a row once at a time (rowDriver.ts); its failure is logged and the row reconciled later. */
  function track(row: OutboxRow, fresh: boolean): Promise<void> {
    const existing = inFlight.get(row.id);
    if (existing !== undefined) return existing;
    let failed = false;
    const promise = driver
      .drive(row, fresh)
      .then(() => {
        setChainDown(false);
        if (!watchDue && reopenHooks.has(row.kind)) {
          watchDue = true;
          watchSleeper.wake();
        }
      })
      .catch((error: unknown) => {
        if (isChainUnreachable(error)) {
          if (!chainDown)
            log.warn({ id: row.id, kind: row.kind }, "chain unreachable; the transaction will be retried");
          setChainDown(true);
        } else {
          log.error({ id: row.id, kind: row.kind, err: error }, "outbox row failed; it will be reconciled");
        }
        outcomeWaiters.settle(row.id, (w) => w.reject(error));
        hashWaiters.settle(row.id, (w) => w.reject(error));
        failed = true;
        throw error;
      })
      .finally(() => {
        inFlight.delete(row.id);
        driving.delete(row.id);
        // A row that failed here is driven again (here or elsewhere) and held again if it must be.
        if (failed) feeHold.release(row.id);
        // A row that failed is reconciled by a pass at once. One that finished leaves nothing to sign
        // (rows enqueued meanwhile woke the loop themselves) and its housekeeping waits for the pause
        // the loop is in (at most `reconcileIntervalMs` while rows were in flight): not waking here
        // keeps the loop's store reads off the path of the outcome's waiters.
        if (failed) {
          dirty = true;
          sleeper.wake();
        }
      });
    // A tracked promise is awaited by `flush`/`waitFor` when they need its error; never unhandled.
    promise.catch(() => undefined);
    inFlight.set(row.id, promise);
    driving.set(row.id, {
      since: clock.now(),
      fromBlock: newest(newest(head, driver.lastSeenBlock()), row.from_block ?? undefined),
    });
    return promise;
  }

  /**
   * Reads the chain's head for the lost-transaction check: only while a row here has waited
   * `HEAD_READ_MS` (a row mined at once never costs a read) and at most once per `HEAD_READ_MS`. viem
   * answers from the block number its receipt waits polled last, when that is fresh.
   */
  async function readHead(): Promise<void> {
    const now = clock.now();
    const every = Math.min(HEAD_READ_MS, stuckAfterMs);
    if (now - headReadAt < every) return;
    if (!waitedFor(now, every)) return;
    headReadAt = now;
    try {
      head = await client.getBlockNumber();
    } catch {
      // An unreachable chain is the passes' business; the time rule still holds.
      return;
    }
    for (const row of driving.values()) row.fromBlock ??= head;
  }

  /** Whether a whole block was mined after a row's broadcast without it (and not checked for yet). */
  function passedOver(): boolean {
    if (head === undefined || (headChecked !== undefined && head <= headChecked)) return false;
    for (const { fromBlock } of driving.values()) {
      if (fromBlock !== undefined && head > fromBlock + BigInt(confirmations)) return true;
    }
    return false;
  }

  /** Whether a row here has waited long enough to ask the chain whether it lost transactions. */
  function rewindCheckWanted(): boolean {
    if (rewindCheckDue) return true;
    // Rows waiting for the fee to fall are known to be unmined, and broadcast again each round: a node
    // that refuses them as below the base fee does not count them pending, which is no lost chain.
    if (driving.size > 0 && [...driving.keys()].every((id) => feeHold.has(id))) return false;
    if (passedOver()) return true;
    const now = clock.now();
    if (now - lastRewindCheck < stuckAfterMs) return false;
    return waitedFor(now, stuckAfterMs);
  }

  /** Whether a row here has been driven for at least `ms`. */
  function waitedFor(now: number, ms: number): boolean {
    for (const { since } of driving.values()) if (now - since >= ms) return true;
    return false;
  }

  /** Re-broadcasts what a rewound chain lost (rewindRepair.ts); one repair at a time. */
  function repairIfRewound(): Promise<void> {
    repairing ??= (async () => {
      await readHead();
      if (!rewindCheckWanted()) return;
      lastRewindCheck = clock.now();
      rewindCheckDue = false;
      headChecked = head;
      const repair = await repairRewind({ store, client, key, scope, logger: log });
      if (repair === undefined) return;
      for (const filler of repair.fillers) track(filler, false);
      // Rows waiting here began a new wait: do not check again before they had time to be mined.
      const now = clock.now();
      for (const row of driving.values()) {
        row.since = now;
        row.fromBlock = head;
      }
    })().finally(() => {
      repairing = undefined;
    });
    return repairing;
  }

  // ---- passes ------------------------------------------------------------------------------------

  async function signAndSend(): Promise<void> {
    for (;;) {
      const signed = await signQueued();
      for (const row of signed) track(row, true);
      if (signed.length < maxSignPerPass) return;
    }
  }

  async function reconcile(all: boolean): Promise<void> {
    const first = !reconciledOnce;
    const rows = await openOutboxRows(store, scope, [...handlers.keys()], all || first ? undefined : staleMs);
    reconciledOnce = true;
    lastReconcile = clock.now();
    for (const row of rows) if (!inFlight.has(row.id)) track(row, false);
  }

  async function heartbeat(): Promise<void> {
    if (inFlight.size === 0 || clock.now() - lastTouch < staleMs / 3) return;
    lastTouch = clock.now();
    await touchRows(store, [...inFlight.keys()]);
  }

  async function pass(): Promise<void> {
    if (chainDown || !reconciledOnce || clock.now() - lastReconcile >= reconcileIntervalMs) {
      // While the chain was away, rows this worker failed to drive are not stale yet: take them all, in
      // nonce order, before signing more.
      await reconcile(chainDown);
    }
    await signAndSend();
    await heartbeat();
    await repairIfRewound();
  }

  async function loop(): Promise<void> {
    let failing = false;
    while (running) {
      dirty = false;
      try {
        await pass();
        failing = false;
        if (inFlight.size === 0) setChainDown(false);
      } catch (error) {
        if (isChainUnreachable(error)) setChainDown(true);
        if (!failing) log.warn({ err: error }, "outbox pass failed; it will be retried");
        failing = true;
      }
      if (!running) break;
      if (dirty && !chainDown && !failing) continue;
      const watching = inFlight.size > 0 || chainDown || failing || (await othersOpen().catch(() => true));
      await sleeper.pause(watching ? reconcileIntervalMs : idlePollMs);
    }
  }

  async function flush(): Promise<void> {
    await reconcile(true);
    await signAndSend();
    const driven = new Set<Promise<void>>();
    while (inFlight.size > 0) {
      for (const promise of inFlight.values()) driven.add(promise);
      const settled = Promise.allSettled([...inFlight.values()]);
      // Rows stuck behind a nonce the chain lost would never settle: look for a rewind meanwhile.
      const done = await Promise.race([settled.then(() => true), pauseMs(reconcileIntervalMs, false)]);
      if (!done)
        await repairIfRewound().catch((error: unknown) => log.warn({ err: error }, "rewind check failed"));
    }
    const errors = (await Promise.allSettled([...driven])).flatMap((r) =>
      r.status === "rejected" ? [r.reason as unknown] : [],
    );
    if (errors.length > 0) throw errors[0];
  }

  const waits: OutboxWaitDeps = {
    store,
    client,
    outcomeWaiters,
    hashWaiters,
    running: () => running,
    hasHandler: (kind) => handlers.has(kind),
    recent: (id) => driver.recent(id),
    inFlight: (id) => inFlight.get(id),
    wake() {
      dirty = true;
      sleeper.wake();
    },
    flush,
    signAndSend,
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
        {
          store,
          key,
          scope,
          check: checkKind,
          fromBlock: async () => driver.lastSeenBlock() ?? (await client.getBlockNumber()),
        },
        work,
      );
      for (const row of signed) track(row, true);
      return result;
    },
    async enqueue(db, request) {
      checkKind(request);
      const id = await insertOutboxRow(db, scope, request);
      if (db === store) this.wake();
      return id;
    },
    wake() {
      committed = true;
      dirty = true;
      sleeper.wake();
    },
    handle(kind, handler) {
      handlers.set(kind, handler);
    },
    onReorg(kind, hook) {
      reopenHooks.set(kind, hook);
      if (!watchDue) {
        watchDue = true;
        watchSleeper.wake();
      }
    },
    waitFor: (id) => waitForOutcome(waits, id),
    waitForHash: (id) => waitForSigned(waits, id),
    flush,
    feeHold: () => feeHold.state(),
    async start() {
      if (running) return;
      running = true;
      unlisten = await store.listen("outbox", checkLater);
      loopDone = loop();
      watchDone = watchLoop();
    },
    async stop() {
      running = false;
      sleeper.wake();
      watchSleeper.wake();
      await loopDone;
      await watchDone;
      await Promise.allSettled([...inFlight.values()]);
      if (laterCheck !== undefined) clearTimeout(laterCheck);
      laterCheck = undefined;
      await unlisten?.();
      unlisten = undefined;
    },
  };
}

/**
 * How long a row waits before the worker reads the chain's head for the lost-transaction check, and
 * the least time between two reads (capped by `stuckAfterMs`).
 */
const HEAD_READ_MS = 1_000;

/** The larger of two block numbers, either possibly unknown. */
function newest(a: bigint | undefined, b: bigint | undefined): bigint | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return a > b ? a : b;
}

/** Resolves `value` after `ms` without keeping the process alive. */
function pauseMs<T>(ms: number, value: T): Promise<T> {
  return new Promise((resolve) => setTimeout(() => resolve(value), ms).unref?.());
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
