/**
 * A usage ledger for one gate process. Every operation reads and writes its maps without awaiting in
 * between, so on Node's single thread each is atomic; the `async` signatures only match the shared
 * interface. Counts are lost when the process stops (and charges not yet flushed with them): use
 * `createPostgresUsageLedger` when that matters or when several instances serve one API.
 */
import { randomBytes } from "node:crypto";
import type { Clock } from "../../../../protocol/clock.ts";
import {
  applyUsage,
  type Reservation,
  type UsageBatch,
  type UsageBatchItem,
  type UsageCycle,
  type UsageLedger,
  type UsageRequest,
  usageRef,
} from "./usageLedger.ts";

type Batch = { items: UsageBatchItem[]; claimedAt: number };

/** An item not yet resolved: in a claimed batch (`sentAt` undefined) or sent. */
type OpenItem = UsageBatchItem & { sentAt: number | undefined };

/**
 * @example
/** The ledger's state. Invariant: `unsettled` = Σ open amounts + Σ cycle pendings. */
type MemoryBook = {
  clock: Clock;
  ledgerId: string;
  cycles: Map<bigint, UsageCycle>;
  /** Batches claimed and not yet marked sent. */
  claimed: Map<string, Batch>;
  /** Items not yet resolved, by ref. */
  open: Map<string, OpenItem>;
  unsettled: bigint;
  nextBatch: number;
};

/**
 * @example
 * const gate = paymentGate({ …, usageLedger: createMemoryUsageLedger({ clock }) });
 */
export function createMemoryUsageLedger(options: { clock: Clock; ledgerId?: string }): UsageLedger {
  const book: MemoryBook = {
    clock: options.clock,
    ledgerId: options.ledgerId ?? randomBytes(16).toString("hex"),
    cycles: new Map(),
    claimed: new Map(),
    open: new Map(),
    unsettled: 0n,
    nextBatch: 1,
  };
  const reserveNow = (request: UsageRequest): Reservation => {
    const result = applyUsage(book.cycles.get(request.subscriptionId), book.unsettled, request);
    if (result.cycle !== undefined) book.cycles.set(request.subscriptionId, result.cycle);
    book.unsettled = result.unsettled;
    return result.reservation;
  };

  return {
    reserveNow,
    async reserve(request) {
      return reserveNow(request);
    },
    async claimBatch(batchOptions) {
      return claimBatch(book, batchOptions);
    },
    async markBatchSent(batchId) {
      markBatchSent(book, batchId);
    },
    async resolve(outcomes) {
      let resolved = 0;
      for (const { ref } of outcomes) {
        const item = book.open.get(ref);
        if (item === undefined) continue;
        book.open.delete(ref);
        book.unsettled -= item.amount;
        resolved++;
      }
      return resolved;
    },
    async unsettled() {
      return book.unsettled;
    },
    async unresolved(query) {
      return unresolved(book, query);
    },
    async cycle(subscriptionId) {
      const cycle = book.cycles.get(subscriptionId);
      return cycle === undefined ? undefined : { ...cycle };
    },
  };
}

function claimBatch(
  book: MemoryBook,
  { maxItems, staleMs }: { maxItems: number; staleMs: number },
): UsageBatch | undefined {
  const now = book.clock.now();
  for (const [id, batch] of book.claimed) {
    if (now - batch.claimedAt >= staleMs) {
      batch.claimedAt = now;
      return { id, items: batch.items.map((item) => ({ ...item })) };
    }
  }
  const id = String(book.nextBatch);
  const items: UsageBatchItem[] = [];
  for (const [subscriptionId, cycle] of book.cycles) {
    if (items.length >= maxItems) break;
    if (cycle.pending === 0n) continue;
    items.push({ ref: usageRef(book.ledgerId, id, subscriptionId), subscriptionId, amount: cycle.pending });
    cycle.pending = 0n;
  }
  if (items.length === 0) return undefined;
  book.nextBatch++;
  book.claimed.set(id, { items, claimedAt: now });
  for (const item of items) book.open.set(item.ref, { ...item, sentAt: undefined });
  return { id, items: items.map((item) => ({ ...item })) };
}

function markBatchSent(book: MemoryBook, batchId: string): void {
  const batch = book.claimed.get(batchId);
  if (batch === undefined) return;
  book.claimed.delete(batchId);
  const now = book.clock.now();
  for (const item of batch.items) {
    const entry = book.open.get(item.ref);
    if (entry !== undefined && entry.sentAt === undefined) entry.sentAt = now;
  }
}

function unresolved(
  book: MemoryBook,
  { olderThanMs, limit }: { olderThanMs: number; limit: number },
): UsageBatchItem[] {
  const cutoff = book.clock.now() - olderThanMs;
  const items: UsageBatchItem[] = [];
  for (const item of book.open.values()) {
    if (items.length >= limit) break;
    if (item.sentAt !== undefined && item.sentAt <= cutoff) {
      items.push({ ref: item.ref, subscriptionId: item.subscriptionId, amount: item.amount });
    }
  }
  return items;
}
