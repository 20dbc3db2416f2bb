/**
 * The channel claim worker: turns the latest vouchers of many channels into one `claimMany` through the
 * outbox, does the cooperative closes payees asked for, and watches the chain for close requests and
 * closes made elsewhere (docs/channels.md, "Claims").
 *
 * When it claims: once the unclaimed value reaches `thresholdValue`, once the oldest unclaimed voucher
 * is `maxAgeMs` old, and at once when a payer asked to close a channel holding an unclaimed voucher (the
 * claim must land before the payer may withdraw). A channel in flight is skipped by the rounds; the
 * worker looks again as soon as its outcome is recorded, so a voucher or close that came meanwhile waits
 * for nothing else.
 *
 * Invariants:
 * - A claim is enqueued in the store transaction that marks its channels in flight (claim_outbox_id), so
 *   a crash either leaves both or neither; the outbox handler clears the mark with the outcome, exactly
 *   once across crashes and instances. A channel is in at most one claim or close at a time.
 * - Outcomes come from the receipt's per-item events; where a receipt says nothing (reverted, dropped,
 *   deferred, NothingNew), `claimed` is read back from the chain, which is the truth. A claim can never
 *   pay twice: the contract pays `cumulative − claimed`.
 * - A confirmed claim a reorganisation undid is reopened by the outbox's watch (channelClaimReorg.ts):
 *   its channels are in flight again at what they held before it, its bytes are sent again, and its new
 *   outcome is recorded here as a first one; `channel.claimed` announces nothing twice.
 *
 * Its parts: the rounds that enqueue claims and closes (channelClaimRounds.ts), the operator rights
 * (channelPayeeOperators.ts), the log follower (channelLogFollower.ts), and the outcome handlers
 * (channelClaimOutcomes.ts) with their events (channelClaimEvents.ts); this file keeps the loop.
 */
import { acquireChainWatch } from "../../../facilitator/chainWatch.ts";
import {
  createWakeablePause,
  IDLE_BACKSTOP_MS,
  type WakeablePause,
} from "../../../facilitator/wakeablePause.ts";
import { handleChannelClaimOutcomes } from "./channelClaimOutcomes.ts";
import { type ClaimPolicy, claimRound, closeRound } from "./channelClaimRounds.ts";
import type { ChannelClaimWorkerContext, ChannelClaimWorkerOptions } from "./channelClaimTypes.ts";
import { type ChannelLogFollower, createChannelLogFollower } from "./channelLogFollower.ts";
import { createPayeeOperators, type PayeeOperators } from "./channelPayeeOperators.ts";

export {
  CHANNEL_CLAIM_KIND,
  CHANNEL_CLOSE_KIND,
  type ChannelClaimWorkerContext,
  type ChannelClaimWorkerOptions,
} from "./channelClaimTypes.ts";

/** Blocks per log query when following the chain for close requests and closes. */
const MAX_LOG_RANGE = 2_000n;

/** The worker's parts and the state of its loop. */
type ClaimWorkerState = {
  ctx: ChannelClaimWorkerContext;
  policy: ClaimPolicy;
  intervalMs: number;
  operators: PayeeOperators;
  logs: ChannelLogFollower;
  pause: WakeablePause;
  running: Promise<void> | undefined;
  stopping: boolean;
  /** The contract may have new logs (the chain watch said so); the logs are also read every `intervalMs`. */
  chainDirty: boolean;
  lastWatch: number;
  releaseWatch: (() => void) | undefined;
  /** Set by `signal` and the chain watch: a wake-up during a round is not lost. */
  woken: boolean;
};

/** Cuts the pause short; a wake-up during a round makes the loop run another at once. */
function wake(w: ClaimWorkerState) {
  w.woken = true;
  w.pause.wake();
}

/**
 * One round: watch, close, claim. Returns how many channels were put in a transaction. The chain is
 * read when it may have news (`force`, the chain watch, or `intervalMs` since the last read).
 */
async function round(w: ClaimWorkerState, force: boolean): Promise<number> {
  if (force || w.chainDirty || Date.now() - w.lastWatch >= w.intervalMs) {
    w.chainDirty = false;
    w.lastWatch = Date.now();
    try {
      await w.logs.follow();
    } catch (error) {
      w.chainDirty = true;
      throw error;
    }
  }
  const closes = await closeRound(w.ctx);
  const claims = await claimRound(w.ctx, w.policy, w.operators);
  if (closes + claims > 0) w.ctx.outbox.wake();
  return closes + claims;
}

async function loop(w: ClaimWorkerState) {
  while (!w.stopping) {
    try {
      w.woken = false;
      await round(w, false);
    } catch (error) {
      w.ctx.logger.warn({ err: error }, "channel claim round failed; retrying");
    }
    if (!w.stopping && !w.woken) await w.pause.pause(w.intervalMs);
  }
}

function start(w: ClaimWorkerState) {
  if (w.running !== undefined) return;
  w.stopping = false;
  const shared = acquireChainWatch(w.ctx.publicClient, w.ctx.logger);
  const stopWatching = shared.watch.watch(w.ctx.contract, () => {
    w.chainDirty = true;
    wake(w);
  });
  const stopResume = w.ctx.tokenPause?.onResume(() => wake(w));
  w.releaseWatch = () => {
    stopWatching();
    stopResume?.();
    shared.release();
  };
  w.running = loop(w);
}

async function stop(w: ClaimWorkerState) {
  w.stopping = true;
  w.pause.wake();
  await w.running;
  w.running = undefined;
  w.releaseWatch?.();
  w.releaseWatch = undefined;
}

export function createChannelClaimWorker(
  ctx: ChannelClaimWorkerContext,
  options: ChannelClaimWorkerOptions = {},
) {
  const w: ClaimWorkerState = {
    ctx,
    policy: {
      thresholdValue: options.thresholdValue ?? 1_000_000n,
      maxAgeMs: options.maxAgeMs ?? 600_000,
      maxBatch: options.maxBatch ?? 100,
    },
    intervalMs: options.intervalMs ?? IDLE_BACKSTOP_MS,
    operators: createPayeeOperators(ctx, options.operatorCacheMs ?? 60_000),
    logs: createChannelLogFollower(ctx, BigInt(ctx.logsRange ?? MAX_LOG_RANGE)),
    pause: createWakeablePause(),
    running: undefined,
    stopping: false,
    chainDirty: true,
    lastWatch: Number.NEGATIVE_INFINITY,
    releaseWatch: undefined,
    woken: false,
  };
  handleChannelClaimOutcomes(ctx, () => wake(w));

  return {
    /** Runs one round now (tests, and `flush` on demand). */
    round: (force = true): Promise<number> => round(w, force),
    /** Cuts the pause short: new vouchers or a close request arrived. */
    signal: () => wake(w),
    async start() {
      start(w);
    },
    async stop() {
      await stop(w);
    },
  };
}

export type ChannelClaimWorker = ReturnType<typeof createChannelClaimWorker>;
