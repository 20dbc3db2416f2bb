/**
 * When the outbox worker asks whether the chain lost transactions it recorded (rewindRepair.ts), and
 * the rows it drives as that check sees them (createOutbox.ts, invariant 6). The check costs two RPC
 * calls and runs when a whole block was mined after a row's broadcast without it (the head read at most
 * once a second, and only while a row has waited a second), at most once per block; when a row waits
 * for its receipt longer than `stuckAfterMs`, at most once per `stuckAfterMs`; and once when the chain
 * comes back.
 */
import type { Logger } from "pino";
import type { Address } from "viem";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import type { FeeHold } from "./feeHold.ts";
import type { GasKey } from "./gasKey.ts";
import type { OutboxRow } from "./outboxRecords.ts";
import { repairRewind } from "./rewindRepair.ts";

export type RewindCheckDeps = {
  store: Store;
  client: Parameters<typeof repairRewind>[0]["client"] & { getBlockNumber(): Promise<bigint> };
  key: GasKey;
  scope: { chainId: number; sender: Address };
  clock: Clock;
  log: Logger;
  feeHold: FeeHold;
  confirmations: number;
  stuckAfterMs: number;
  /** The highest block a receipt has shown (rowDriver.ts). */
  lastSeenBlock: () => bigint | undefined;
  /** Drives a nonce filler the repair signed. */
  track: (row: OutboxRow) => void;
};

export type RewindCheck = {
  /** Whether the chain was unreachable on the last attempt. */
  readonly chainDown: boolean;
  /** The chain answered (`false`) or did not (`true`); answering again after it did not asks for a check. */
  setChainDown(down: boolean): void;
  /** This worker began driving the row. */
  driving(row: OutboxRow): void;
  /** This worker stopped driving the row. */
  done(id: number): void;
  /** Re-broadcasts what a rewound chain lost, when a check is due; one repair at a time. */
  repairIfRewound(): Promise<void>;
};

/**
 * How long a row waits before the worker reads the chain's head for the lost-transaction check, and
 * the least time between two reads (capped by `stuckAfterMs`).
 */
const HEAD_READ_MS = 1_000;

type Driven = { since: number; fromBlock: bigint | undefined };

type RewindState = {
  /**
   * Each row in flight: when this worker began driving it (`since`), and the newest block known then
   * (`fromBlock`): the head read last, the newest receipt's, or the block the row was signed at
   * (`undefined`: none known; the first head read gives it one). Any of them may be a block behind the
   * chain, so the row may have reached the node only in time for the block after it: a head more than
   * `confirmations` past it without the row's outcome means a whole block was mined without the row. A
   * nearer head could be a receipt not fetched yet, and would cost a check that finds nothing.
   */
  driving: Map<number, Driven>;
  /** The chain's head as last read for the lost-transaction check, and when. */
  head: bigint | undefined;
  headReadAt: number;
  /** The head at the last lost-transaction check: one check per block at most. */
  headChecked: bigint | undefined;
  lastRewindCheck: number;
  chainDown: boolean;
  /** The chain was unreachable and answers again: it may be a node restarted from an older state. */
  rewindCheckDue: boolean;
  repairing: Promise<void> | undefined;
};

export function createRewindCheck(deps: RewindCheckDeps): RewindCheck {
  const state: RewindState = {
    driving: new Map(),
    head: undefined,
    headReadAt: 0,
    headChecked: undefined,
    lastRewindCheck: 0,
    chainDown: false,
    rewindCheckDue: false,
    repairing: undefined,
  };
  return {
    get chainDown() {
      return state.chainDown;
    },
    setChainDown(down) {
      if (state.chainDown && !down) state.rewindCheckDue = true;
      state.chainDown = down;
    },
    driving(row) {
      state.driving.set(row.id, {
        since: deps.clock.now(),
        fromBlock: newest(newest(state.head, deps.lastSeenBlock()), row.from_block ?? undefined),
      });
    },
    done(id) {
      state.driving.delete(id);
    },
    repairIfRewound() {
      state.repairing ??= repair(deps, state).finally(() => {
        state.repairing = undefined;
      });
      return state.repairing;
    },
  };
}

async function repair(deps: RewindCheckDeps, state: RewindState): Promise<void> {
  await readHead(deps, state);
  if (!rewindCheckWanted(deps, state)) return;
  state.lastRewindCheck = deps.clock.now();
  state.rewindCheckDue = false;
  state.headChecked = state.head;
  const repaired = await repairRewind({
    store: deps.store,
    client: deps.client,
    key: deps.key,
    scope: deps.scope,
    logger: deps.log,
  });
  if (repaired === undefined) return;
  for (const filler of repaired.fillers) deps.track(filler);
  // Rows waiting here began a new wait: do not check again before they had time to be mined.
  const now = deps.clock.now();
  for (const row of state.driving.values()) {
    row.since = now;
    row.fromBlock = state.head;
  }
}

/**
 * Reads the chain's head for the lost-transaction check: only while a row here has waited
 * `HEAD_READ_MS` (a row mined at once never costs a read) and at most once per `HEAD_READ_MS`. viem
 * answers from the block number its receipt waits polled last, when that is fresh.
 */
async function readHead(deps: RewindCheckDeps, state: RewindState): Promise<void> {
  const now = deps.clock.now();
  const every = Math.min(HEAD_READ_MS, deps.stuckAfterMs);
  if (now - state.headReadAt < every) return;
  if (!waitedFor(state, now, every)) return;
  state.headReadAt = now;
  try {
    state.head = await deps.client.getBlockNumber();
  } catch {
    // An unreachable chain is the passes' business; the time rule still holds.
    return;
  }
  for (const row of state.driving.values()) row.fromBlock ??= state.head;
}

/** Whether a whole block was mined after a row's broadcast without it (and not checked for yet). */
function passedOver(deps: RewindCheckDeps, state: RewindState): boolean {
  const { head, headChecked } = state;
  if (head === undefined || (headChecked !== undefined && head <= headChecked)) return false;
  for (const { fromBlock } of state.driving.values()) {
    if (fromBlock !== undefined && head > fromBlock + BigInt(deps.confirmations)) return true;
  }
  return false;
}

/** Whether a row here has waited long enough to ask the chain whether it lost transactions. */
function rewindCheckWanted(deps: RewindCheckDeps, state: RewindState): boolean {
  if (state.rewindCheckDue) return true;
  // Rows waiting for the fee to fall are known to be unmined, and broadcast again each round: a node
  // that refuses them as below the base fee does not count them pending, which is no lost chain.
  if (state.driving.size > 0 && [...state.driving.keys()].every((id) => deps.feeHold.has(id))) return false;
  if (passedOver(deps, state)) return true;
  const now = deps.clock.now();
  if (now - state.lastRewindCheck < deps.stuckAfterMs) return false;
  return waitedFor(state, now, deps.stuckAfterMs);
}

/** Whether a row here has been driven for at least `ms`. */
function waitedFor(state: RewindState, now: number, ms: number): boolean {
  for (const { since } of state.driving.values()) if (now - since >= ms) return true;
  return false;
}

/** The larger of two block numbers, either possibly unknown. */
function newest(a: bigint | undefined, b: bigint | undefined): bigint | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return a > b ? a : b;
}
