/**
 * The queue's two statements per incoming payment, shared by the payments checked at the same time
 * (coalescer.ts): its nonce looked up, and its row inserted. A lone payment runs each at once; a burst
 * costs one lookup and one insert per round instead of one of each per payment.
 *
 * A payment that arrives with nothing in flight, no claim running and no other lone payment on its way
 * is sent at once, alone, by the batching rule: its row goes in already claimed into a batch of its
 * own, signed, in one transaction (batchClaims.ts `insertAndClaim`). Any other arrival is queued for
 * the batching loop.
 */
import type { Address } from "viem";
import type { Store } from "../../store/store.ts";
import type { Outbox } from "../outbox/outboxTypes.ts";
import {
  findPaymentByNonce,
  findPaymentsByNonce,
  insertPayments,
  type NewPayment,
  type PaymentRow,
} from "../paymentRecords.ts";
import { insertAndClaim } from "./batchClaims.ts";
import type { BatchingLoop } from "./batchingLoop.ts";
import { createCoalescer } from "./coalescer.ts";
import type { InFlightBatches } from "./inFlightBatches.ts";
import type { LoopSignals } from "./loopSignals.ts";

export type PaymentQueue = {
  /** The row holding this nonce, if any. */
  lookUp(nonce: string): Promise<PaymentRow | undefined>;
  /** Queues the payment (or sends it alone at once); `undefined` when its nonce is taken. */
  insert(payment: NewPayment): Promise<PaymentRow | undefined>;
};

export function createPaymentQueue(deps: {
  store: Store;
  outbox: Outbox;
  network: string;
  batchSettler: Address;
  signals: LoopSignals;
  inFlight: InFlightBatches;
  loop: Pick<BatchingLoop, "running" | "claiming">;
}): PaymentQueue {
  const { store, signals } = deps;
  const lookUp = createCoalescer<string, PaymentRow | undefined>(async (nonces) => {
    if (nonces.length === 1) return [await findPaymentByNonce(store, nonces[0]!)];
    const rows = await findPaymentsByNonce(store, nonces);
    const byNonce = new Map<string, PaymentRow>(rows.map((row) => [row.nonce, row]));
    return nonces.map((nonce) => byNonce.get(nonce.toLowerCase()));
  });
  const queued = createCoalescer<NewPayment, PaymentRow | undefined>((payments) =>
    insertQueued(store, signals, payments),
  );
  /** A lone payment is being inserted and claimed at once; one at a time. */
  let lone = false;

  async function insert(payment: NewPayment): Promise<PaymentRow | undefined> {
    if (!deps.loop.running || lone || deps.loop.claiming || deps.inFlight.size > 0) {
      const row = await queued(payment);
      if (row !== undefined) signals.signal();
      return row;
    }
    lone = true;
    // Counted before the statement, as for a queued insert; nothing is notified when it rolls back.
    signals.ownInsertStarted();
    try {
      const claimed = await insertAndClaim(
        { store, outbox: deps.outbox, network: deps.network, batchSettler: deps.batchSettler },
        payment,
      );
      if (claimed === undefined) {
        signals.ownInsertUndone();
        return undefined;
      }
      deps.inFlight.add(claimed);
      return claimed.rows[0];
    } catch (error) {
      signals.ownInsertUndone();
      throw error;
    } finally {
      lone = false;
    }
  }

  return { lookUp, insert };
}

/** One insert statement for the payments of a round, each answered with its own row (or `undefined`). */
async function insertQueued(
  store: Store,
  signals: LoopSignals,
  payments: readonly NewPayment[],
): Promise<(PaymentRow | undefined)[]> {
  // One payment per nonce in the statement (the first); a second one naming it lost to the first,
  // as it would to a row already there, and looks up what holds the nonce. So every row the
  // statement returns is exactly the payment it is handed to.
  const first = new Map<string, NewPayment>();
  for (const p of payments) if (!first.has(p.nonce.toLowerCase())) first.set(p.nonce.toLowerCase(), p);
  // Counted before the statement: its notification may be heard before the statement resolves.
  signals.ownInsertStarted();
  let rows: PaymentRow[];
  try {
    rows = await insertPayments(store, [...first.values()]);
  } catch (error) {
    // Not committed, so no notification.
    signals.ownInsertUndone();
    throw error;
  }
  const inserted = new Map<string, PaymentRow>(rows.map((row) => [row.nonce, row]));
  return payments.map((p) =>
    first.get(p.nonce.toLowerCase()) === p ? inserted.get(p.nonce.toLowerCase()) : undefined,
  );
}
