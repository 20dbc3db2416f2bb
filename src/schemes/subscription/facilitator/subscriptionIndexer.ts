/**
 * Follows the SubscriptionManager's events into the store (tables `plans`, `subscriptions`) and the
 * event log (`plan.*`, `subscription.*`, `allowance.*`), which webhooks, analytics, gates (cache
 * invalidation through `GET /events`) and the renewal keeper read.
 *
 * Invariants:
 * - A chunk of logs is applied in one store transaction together with the cursor that says it was
 *   read, so a crash re-reads the chunk rather than skipping or half-applying it.
 * - Every applied log is recorded by (chain, transaction hash, log index); a log met again (a retried
 *   chunk, a second facilitator instance on the same database) changes nothing and emits nothing.
 * - The cursor row is locked and compared before a chunk is applied; an instance that lost the race
 *   re-reads the cursor instead of applying a chunk another instance already applied.
 * - Rows are only ever written from logs in chain order, so the index equals the chain state at the
 *   cursor's block (plus anything the keeper or relays read fresh from the chain themselves).
 * - The cursor keeps its block's hash, and each applied log its block's. When the chain no longer has
 *   the cursor's block (a reorganisation deeper than `confirmations`), the index follows it: the cursor
 *   goes back `REORG_DEPTH` blocks, the applied logs above it whose block is not the chain's any more
 *   are forgotten and their events marked undone (`events.undone_at`: analytics stops counting them),
 *   the subscriptions they touched are read again from the chain, and the logs of the new chain are
 *   applied from there; logs still on the chain are not applied twice. An event whose transaction is
 *   mined again with the same outcome (the facilitator sends an undone renewal or deduction again) is
 *   revived, not recorded a second time. A chain whose head is more than `REORG_DEPTH` blocks below
 *   the cursor (a devnet restarted under the same database) has the deployment's rows dropped and
 *   rebuilt from the chain as it is, rather than the new chain's logs being skipped.
 */
import { getNetworkConfig } from "../../../chain/networks.ts";
import { isChainUnreachable } from "../../../facilitator/chainErrors.ts";
import { acquireChainWatch } from "../../../facilitator/chainWatch.ts";
import { createWakeablePause, IDLE_BACKSTOP_MS } from "../../../facilitator/wakeablePause.ts";
import { readCursor } from "./indexCursor.ts";
import { type IndexerContext, indexerDeps } from "./indexerDeps.ts";
import { createLogReader, type SyncSettings, syncIndex } from "./indexSync.ts";
import type {
  SubscriptionIndexer,
  SubscriptionIndexerOptions,
  SyncResult,
} from "./subscriptionIndexerTypes.ts";

export type {
  SubscriptionIndexer,
  SubscriptionIndexerOptions,
  SyncResult,
} from "./subscriptionIndexerTypes.ts";

/**
 * Composes the indexer: its cursor (indexCursor.ts), a fresh index's start (indexSnapshot.ts), the sync
 * (indexSync.ts) applying each event (applyManagerEvent.ts, indexedRows.ts, indexLogEvents.ts), and the
 * following of a reorganisation (indexReorganisation.ts); the background loop and the chain watch here.
 */
export function createSubscriptionIndexer(
  ctx: IndexerContext,
  options: SubscriptionIndexerOptions = {},
): SubscriptionIndexer {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the subscription indexer needs a SubscriptionManager address");
  }
  const deps = indexerDeps(ctx, ctx.subscriptionManager);
  const { log, client, manager } = deps;
  const confirmations = BigInt(options.confirmations ?? 0);
  const pollIntervalMs = options.pollIntervalMs ?? (confirmations === 0n ? IDLE_BACKSTOP_MS : 1_000);
  const settings: SyncSettings = {
    confirmations,
    start: options.start ?? (getNetworkConfig(ctx.network)?.isDevnet === false ? "snapshot" : "genesis"),
    logs: createLogReader(deps, BigInt(options.chunkSize ?? ctx.logsRange ?? 2_000)),
  };

  let queue: Promise<unknown> = Promise.resolve();
  let running = false;
  let loopDone: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  let poked = false;
  let releaseWatch: (() => void) | undefined;

  /** One sync at a time: concurrent calls run one after another. */
  function syncOnce(): Promise<SyncResult> {
    const fn = () => syncIndex(deps, settings);
    const next = queue.then(fn, fn);
    queue = next.catch(() => undefined);
    return next;
  }

  async function loop(): Promise<void> {
    let failing = false;
    while (running) {
      poked = false;
      try {
        await syncOnce();
        if (failing) log.info("subscription indexer caught up again");
        failing = false;
      } catch (error) {
        if (!failing) {
          if (isChainUnreachable(error)) log.warn("chain unreachable; the subscription index is behind");
          else log.error({ err: error }, "subscription index sync failed; retrying");
        }
        failing = true;
      }
      if (!running) break;
      if (poked) continue;
      await sleeper.pause(pollIntervalMs);
    }
  }

  const poke = () => {
    poked = true;
    sleeper.wake();
  };

  return {
    syncOnce,
    poke,
    cursor: () => readCursor(deps),
    async start() {
      if (running) return;
      running = true;
      const shared = acquireChainWatch(client, log);
      const stopWatching = shared.watch.watch(manager, poke);
      releaseWatch = () => {
        stopWatching();
        shared.release();
      };
      loopDone = loop();
    },
    async stop() {
      running = false;
      sleeper.wake();
      await loopDone;
      await queue;
      releaseWatch?.();
      releaseWatch = undefined;
    },
  };
}
