/**
 * What wakes the settlement engine's batching loop (batchingLoop.ts) and what the loop knows of the
 * queue without reading it: new payments (here or from the store's `payments` notification), a batch's
 * outcome, a hold that fills up.
 *
 * Invariants:
 * - A signal that arrives while the loop is busy is not lost (`dirty`): the loop looks again before it
 *   sleeps.
 * - `pendingMaybe` is cleared only by a read that saw no signal while it ran (`signals` unchanged), so
 *   a payment queued during a read is always read later.
 * - The store notifies once per insert statement; the statements of this engine (`ownInserts`) already
 *   signalled for their payments, so their notification is not a second reason to read the queue.
 */
import { createWakeablePause, type WakeablePause } from "../wakeablePause.ts";

export class LoopSignals {
  readonly #sleeper: WakeablePause = createWakeablePause();
  /** Set by `signal()`; a signal that arrives while the loop is busy is not lost. */
  dirty = false;
  /** Signals since the loop's round began (new payments, and store notifications that may be ones). */
  arrivals = 0;
  /**
   * While payments are held to fill the next batch: how many more may arrive before it is full. Until
   * then an arrival does not wake the loop (it would only find the batch still held); the linger
   * deadline, a full batch, or a batch's outcome does.
   */
  holdRoom: number | undefined;
  /** Set by `wakeNow()`: an outcome during the round, so a hold decided in it may be stale. */
  outcomeSeen = false;
  /** A hold just ended by its deadline or a full batch: the next claim takes the head at once. */
  holdEnded = false;
  /** `signals` when the loop's last round began (arrivals since then make a claim due when idle). */
  signalsSeen = 0;
  /**
   * Whether the queue may hold payments no read of this loop has seen. Cleared when a read finds the
   * queue empty (or a claim takes all of it) and nothing was signalled since that read began; set by
   * every signal, a requeue, and every pause that ends by its timer (the backstop).
   */
  pendingMaybe = true;
  /** Counts signals, so a read can tell whether one came while it ran. */
  signals = 0;
  /**
   * Insert statements this engine is running or ran whose store notification has not come back (the
   * trigger notifies once per statement, whatever it inserted). Each inserted payment signals the loop
   * itself; the statement's notification (heard by this process too) is then not a second reason to
   * read the queue. A notification beyond these is another instance's payment.
   */
  ownInserts = 0;

  /** New work may be waiting (a payment was queued here or elsewhere). */
  signal(): void {
    this.dirty = true;
    this.arrivals++;
    this.signals++;
    this.pendingMaybe = true;
    if (this.holdRoom !== undefined && --this.holdRoom > 0) return;
    this.#sleeper.wake();
  }

  /** The store's `payments` notification: a payment was inserted here or by another instance. */
  notified(): void {
    if (this.ownInserts > 0) {
      this.ownInserts--;
      return;
    }
    this.signal();
  }

  /** Look now, held or not: a batch's outcome changed what is in flight. */
  wakeNow(): void {
    this.dirty = true;
    this.outcomeSeen = true;
    this.holdRoom = undefined;
    this.#sleeper.wake();
  }

  /** An insert statement of this engine begins (counted first: its notification may come before it resolves). */
  ownInsertStarted(): void {
    this.ownInserts++;
  }

  /** That statement rolled back or inserted nothing: no notification will come for it. */
  ownInsertUndone(): void {
    this.ownInserts = Math.max(0, this.ownInserts - 1);
  }

  /** A round of the loop begins. */
  beginRound(): void {
    this.dirty = false;
    this.arrivals = 0;
    this.outcomeSeen = false;
  }

  /** Sleeps `ms`, or until woken; `true` when woken. */
  pause(ms: number): Promise<boolean> {
    return this.#sleeper.pause(ms);
  }

  /** Ends the pause in progress, if any (the loop stops). */
  wake(): void {
    this.#sleeper.wake();
  }

  /** The backstop: a read for what no signal announced (a lost notification, a dead instance's rows). */
  backstop(): void {
    this.pendingMaybe = true;
    this.ownInserts = 0;
  }
}
