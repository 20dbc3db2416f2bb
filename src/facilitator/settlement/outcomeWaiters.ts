/**
 * `/authorize` callers waiting for their payment's outcome. A waiter is woken when this process records
 * the outcome, with the settled row, which is then not read again. Outcomes another instance records
 * (or this one records without handing the row over: a failure, a reconcile) are found by one lookup
 * for every waiting payment at once, every `pollMs` while anyone waits: one statement per round,
 * however many requests wait (a lookup per waiter cost the store ~8 reads per payment on 2-second
 * blocks, most of the facilitator's statements under load).
 */
import type { Logger } from "pino";
import { z } from "zod";
import type { Clock } from "../../protocol/clock.ts";
import { type ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";
import { type PaymentRow, PaymentRowSchema } from "../paymentRecords.ts";

/** A payment this process saw settle: its row as committed, and the size of the batch it settled in. */
export type SettledOutcome = { row: PaymentRow; batchSize: number };

export type OutcomeWaiters = {
  /**
   * Wakes the waiters of a payment nonce: with its settled row when this process just settled it;
   * without one, they look the payment up at once (it failed, or was queued again).
   */
  notify(nonce: string, settled?: SettledOutcome): void;
  /**
   * Waits until the row is settled or failed, or `timeoutMs` passes (then 503: it carries on).
   * `batchSize` is the size of the batch the payment settled in.
   */
  waitForOutcome(row: PaymentRow, timeoutMs: number): Promise<{ row: PaymentRow; batchSize?: number }>;
  /**
   * The engine stops: every waiter, and any that comes later, is answered 503 at once (the payment
   * carries on in the store; sent again, it gets its outcome from whichever instance runs), and no
   * more looks are made.
   */
  close(): void;
};

/** How often the waiting payments are looked up together while any request waits. */
export const OUTCOME_POLL_MS = 250;
/** Nonces per lookup statement; more waiters take more statements in the same round. */
const NONCES_PER_LOOKUP = 1_000;

/** A settled or failed payment with the size of its batch (`null` without one, or with its row gone). */
const FinalRowSchema = PaymentRowSchema.extend({ outcome_batch_size: z.number().int().nullable() });
const FINAL_ROWS_SQL =
  "SELECT p.*, b.item_count AS outcome_batch_size FROM payments p " +
  "LEFT JOIN settlement_batches b ON b.id = p.batch_id " +
  "WHERE p.nonce = ANY($1::text[]) AND p.status IN ('settled', 'failed')";

type Waiter = {
  deadline: number;
  done(outcome: SettledOutcome | "timeout" | "stopped"): void;
};

export function createOutcomeWaiters(deps: WaiterDeps): OutcomeWaiters {
  const state: WaiterState = {
    deps,
    pollMs: deps.pollMs ?? OUTCOME_POLL_MS,
    waiting: new Map(),
    timer: undefined,
    looking: false,
    lookAgain: false,
    failedLookups: 0,
    closed: false,
  };
  return {
    notify: (nonce, settled) => notify(state, nonce, settled),
    close: () => close(state),
    waitForOutcome: (row, timeoutMs) => waitForOutcome(state, row, timeoutMs),
  };
}

type WaiterDeps = {
  store: Store;
  clock: Clock;
  logger?: Logger | undefined;
  /** Default `OUTCOME_POLL_MS`. */
  pollMs?: number | undefined;
};

/** The waiters of one `createOutcomeWaiters`, and its one lookup round (at most one runs or is timed). */
type WaiterState = {
  readonly deps: WaiterDeps;
  readonly pollMs: number;
  /** The waiters by payment nonce; a nonce's set is never left empty. */
  readonly waiting: Map<string, Set<Waiter>>;
  timer: NodeJS.Timeout | undefined;
  looking: boolean;
  /** A lookup was asked for while one was running: it may have read before the outcome committed. */
  lookAgain: boolean;
  failedLookups: number;
  closed: boolean;
};

function notify(state: WaiterState, nonce: string, settled: SettledOutcome | undefined): void {
  if (settled !== undefined) {
    wake(state, nonce, settled);
    return;
  }
  if (!state.waiting.has(nonce)) return;
  if (state.looking) state.lookAgain = true;
  else schedule(state, 0);
}

function close(state: WaiterState): void {
  state.closed = true;
  clearTimeout(state.timer);
  state.timer = undefined;
  const sets = [...state.waiting.values()];
  state.waiting.clear();
  for (const set of sets) for (const waiter of set) waiter.done("stopped");
}

async function waitForOutcome(
  state: WaiterState,
  row: PaymentRow,
  timeoutMs: number,
): Promise<{ row: PaymentRow; batchSize?: number }> {
  let outcome: SettledOutcome | "timeout" | "stopped" = { row, batchSize: 1 };
  if (row.status !== "settled" && row.status !== "failed") outcome = await waitInLine(state, row, timeoutMs);
  if (outcome === "timeout" || outcome === "stopped") {
    throw new TollgateError(
      "ChainUnavailable",
      outcome === "timeout"
        ? "settlement is taking longer than expected; send the same payment again to get its outcome"
        : "the facilitator is stopping; send the same payment again to get its outcome",
      { retryAfter: 5, details: { nonce: row.nonce, status: row.status } },
    );
  }
  const current = outcome.row;
  if (current.status === "failed") {
    throw new TollgateError(
      (current.failure_code as ErrorCode | null) ?? "InvalidRequest",
      current.failure_message ?? "the payment failed on chain",
      { details: { nonce: current.nonce } },
    );
  }
  return row.status === "settled" ? { row: current } : { row: current, batchSize: outcome.batchSize };
}

/** Adds a waiter for `row`'s nonce and resolves with what it is woken with. */
function waitInLine(
  state: WaiterState,
  row: PaymentRow,
  timeoutMs: number,
): Promise<SettledOutcome | "timeout" | "stopped"> {
  return new Promise<SettledOutcome | "timeout" | "stopped">((resolve) => {
    if (state.closed) {
      resolve("stopped");
      return;
    }
    let set = state.waiting.get(row.nonce);
    if (set === undefined) {
      set = new Set();
      state.waiting.set(row.nonce, set);
    }
    set.add({ deadline: state.deps.clock.now() + timeoutMs, done: resolve });
    schedule(state, Math.max(0, Math.min(state.pollMs, timeoutMs)));
  });
}

function wake(state: WaiterState, nonce: string, outcome: SettledOutcome): void {
  const set = state.waiting.get(nonce);
  if (set === undefined) return;
  state.waiting.delete(nonce);
  for (const waiter of set) waiter.done(outcome);
}

function schedule(state: WaiterState, delayMs: number): void {
  if (state.closed || state.looking || state.waiting.size === 0) return;
  if (state.timer !== undefined) {
    if (delayMs > 0) return;
    clearTimeout(state.timer);
  }
  state.timer = setTimeout(() => look(state), delayMs);
}

/** Answers 503 to the waiters whose deadline passed. */
function expire(state: WaiterState, now: number): void {
  for (const [nonce, set] of state.waiting) {
    for (const waiter of set) {
      if (waiter.deadline > now) continue;
      set.delete(waiter);
      waiter.done("timeout");
    }
    if (set.size === 0) state.waiting.delete(nonce);
  }
}

async function look(state: WaiterState): Promise<void> {
  const { deps } = state;
  state.timer = undefined;
  state.looking = true;
  state.lookAgain = false;
  try {
    // Every waiter, those past their deadline too: an outcome found now is answered, not a 503.
    const nonces = [...state.waiting.keys()];
    for (let i = 0; i < nonces.length; i += NONCES_PER_LOOKUP) {
      const rows = await queryParsed(deps.store, FinalRowSchema, FINAL_ROWS_SQL, [
        nonces.slice(i, i + NONCES_PER_LOOKUP),
      ]);
      for (const { outcome_batch_size, ...row } of rows)
        wake(state, row.nonce, { row, batchSize: outcome_batch_size ?? 1 });
    }
    state.failedLookups = 0;
  } catch (error) {
    // The store is unreachable for now: the waiters keep waiting (and time out at their deadline).
    if (state.failedLookups++ === 0)
      deps.logger?.warn({ err: error }, "cannot look up the outcomes of waiting payments; retrying");
  } finally {
    expire(state, deps.clock.now());
    state.looking = false;
    schedule(state, state.lookAgain ? 0 : state.pollMs);
  }
}
