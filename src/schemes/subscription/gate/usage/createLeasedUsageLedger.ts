/**
 * A usage ledger that spends leased allowance locally (docs/gate.md, "Metering across instances"):
 * each gate instance leases a block of a subscription's units from a shared ledger (PostgreSQL or
 * Redis), checks the cap against its block in memory, and persists the uses it answers into the
 * lease — every use in flight in one write (`spend`), awaited before the answer.
 *
 * Invariants:
 * - A use is answered only once the shared store took it into a live lease, so the units persisted
 *   are exactly the units served (a SIGKILL loses none; a use persisted and not answered when the
 *   process died is charged — at most the requests in flight at that moment).
 * - A lease is spent by this instance only; it is returned when used up, when idle (`idleMs`), after
 *   half its lifetime, and on `close()`. A lease not returned by its expiry (by the store's clock) is
 *   reclaimed by any instance with the units persisted into it; a spend into it afterwards is refused
 *   by the store (fencing), and the use goes through a new lease or the direct path instead.
 * - Lease sizes adapt per subscription: four times larger after a lease was used up, halved after one
 *   came back less than half spent (kept when a flush or a close handed it back), and capped by the
 *   store to a quarter of the cap's room left, so near the cap leases shrink and the last units are
 *   spent directly in the shared store.
 */

import type { GateLogger } from "../../../../gate/gateLogger.ts";
import type { Clock } from "../../../../protocol/clock.ts";
import { type SharedUsageLedger, type StoredLease, spendReservation } from "./usageLeases.ts";
import type { Reservation, UsageLedger, UsageRequest } from "./usageLedger.ts";

export type LeasedUsageLedgerOptions = {
  shared: SharedUsageLedger;
  clock: Clock;
  /** Lifetime of a lease in the store (default 10 000 ms): how long a crashed instance's units wait. */
  leaseTtlMs?: number;
  /** A lease unused this long is returned (default 2 000 ms; near the cap, others wait up to this long). */
  idleMs?: number;
  /** Bounds of the adaptive lease size, in units (defaults 8 and 1 000). */
  minLeaseUnits?: number;
  maxLeaseUnits?: number;
  logger?: GateLogger | undefined;
};

/** A lease as the instance holding it sees it. */
export type HeldLease = { id: string; subscriptionId: bigint; units: bigint; spent: bigint };

export type LeasedUsageLedger = UsageLedger & {
  /** The leases this instance holds now. */
  leases(): HeldLease[];
  /** Returns idle and ageing leases and reclaims expired ones (run on a timer; exposed for tests). */
  tick(): Promise<void>;
  /** Returns every lease this instance holds (before a flush that must count everything served). */
  returnLeases(): Promise<void>;
  /** Stops the timer and returns every lease. */
  close(): Promise<void>;
};

type Local = {
  lease: StoredLease;
  periodStart: number;
  periodEnd: number;
  /** Units handed out locally, persisted or in flight. */
  spent: bigint;
  inflight: number;
  grantedAt: number;
  lastUsedAt: number;
  ended: Promise<void> | undefined;
  release: (() => void) | undefined;
};

/** A lease used up makes the subscription's next one this many times larger (up to `maxLeaseUnits`). */
const GROWTH = 4;

/** Attempts of one use before it is spent directly (each attempt ends a lease or acquires one). */
const MAX_ATTEMPTS = 6;

/** One leased ledger's settings and what it holds: its leases, the grants under way, the sizes wanted. */
type LeaseBook = {
  shared: SharedUsageLedger;
  clock: Clock;
  logger: GateLogger | undefined;
  ttlMs: number;
  idleMs: number;
  minLease: number;
  maxLease: number;
  held: Map<bigint, Local>;
  acquiring: Map<bigint, Promise<unknown>>;
  wants: Map<bigint, number>;
  writer: SpendWriter;
  timer: ReturnType<typeof setInterval> | undefined;
  closed: boolean;
};

/**
 * @example
 * const shared = await createPostgresUsageLedger(store);
 * const gate = paymentGate({ …, usageLedger: createLeasedUsageLedger({ shared, clock: systemClock }) });
 */
export function createLeasedUsageLedger(options: LeasedUsageLedgerOptions): LeasedUsageLedger {
  const { shared } = options;
  const book: LeaseBook = {
    shared,
    clock: options.clock,
    logger: options.logger,
    ttlMs: options.leaseTtlMs ?? 10_000,
    idleMs: options.idleMs ?? 2_000,
    minLease: options.minLeaseUnits ?? 8,
    maxLease: options.maxLeaseUnits ?? 1_000,
    held: new Map(),
    acquiring: new Map(),
    wants: new Map(),
    writer: createSpendWriter(shared, shared.spendWrites ?? 1),
    timer: undefined,
    closed: false,
  };
  return {
    reserve: (request) => reserveLeased(book, request),
    claimBatch: (o) => shared.claimBatch(o),
    markBatchSent: (batchId) => shared.markBatchSent(batchId),
    resolve: (outcomes) => shared.resolve(outcomes),
    unsettled: () => shared.unsettled(),
    unresolved: (o) => shared.unresolved(o),
    cycle: (subscriptionId) => shared.cycle(subscriptionId),
    leases: () =>
      [...book.held.values()].map((local) => ({
        id: local.lease.id,
        subscriptionId: local.lease.subscriptionId,
        units: local.lease.units,
        spent: local.spent,
      })),
    tick: () => tick(book),
    async returnLeases() {
      await Promise.all([...book.held.values()].map((local) => end(book, local, false)));
    },
    async close() {
      book.closed = true;
      if (book.timer !== undefined) clearInterval(book.timer);
      await Promise.all([...book.held.values()].map((local) => end(book, local, false)));
    },
  };
}

/** A use: spent from the lease in hand, through a new lease, or directly in the shared store. */
async function reserveLeased(book: LeaseBook, request: UsageRequest): Promise<Reservation> {
  const { shared, held, acquiring } = book;
  const units = BigInt(request.units);
  if ((request.charge ?? 0n) > 0n || units === 0n || book.closed) return shared.reserve(request);
  const id = request.subscriptionId;
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const local = held.get(id);
    if (local !== undefined && usable(book, local, request, units)) {
      const spent = await spendFrom(book, local, units);
      if (spent !== undefined) return spent;
      continue;
    }
    // The lease in hand cannot take this use: hand it back first, so its room counts again. Then
    // look again: while it was being handed back, another use may have acquired the next one.
    if (local !== undefined) {
      await end(book, local);
      continue;
    }
    const pending = acquiring.get(id);
    if (pending !== undefined) {
      await pending.catch(() => {});
      continue;
    }
    const acquired = acquire(book, request);
    acquiring.set(id, acquired);
    try {
      const reservation = await acquired;
      if (!reservation.ok && reservation.reason === "Leased") {
        // Room held by leases: an expired one (a crashed instance's) is reclaimed now, then once more.
        if ((await shared.reclaimExpired(10)) > 0) return shared.reserve(request);
      }
      return reservation;
    } finally {
      acquiring.delete(id);
    }
  }
  return shared.reserve(request);
}

function startTimer(book: LeaseBook): void {
  if (book.timer !== undefined || book.closed) return;
  book.timer = setInterval(() => void tick(book), Math.max(10, Math.min(book.idleMs, book.ttlMs / 4)));
  book.timer.unref?.();
}

/**
 * Ends a held lease: once its uses in flight are persisted, the store counts it and frees the rest.
 * The subscription's next lease is sized by how this one went, unless it was handed back for a
 * reason that says nothing of demand (`resize` false: a flush, a close).
 */
function end(book: LeaseBook, local: Local, resize = true): Promise<void> {
  const { held, wants, minLease, maxLease } = book;
  if (local.ended !== undefined) return local.ended;
  if (held.get(local.lease.subscriptionId) === local) held.delete(local.lease.subscriptionId);
  const want = wants.get(local.lease.subscriptionId) ?? minLease;
  const next = !resize
    ? want
    : local.spent >= local.lease.units
      ? Math.min(maxLease, want * GROWTH)
      : local.spent * 2n < local.lease.units
        ? Math.max(minLease, Math.floor(want / 2))
        : want;
  if (wants.size > 10_000) wants.clear();
  wants.set(local.lease.subscriptionId, next);
  local.ended = new Promise<void>((resolve) => {
    local.release = resolve;
    if (local.inflight === 0) resolve();
  }).then(() =>
    book.shared.release(local.lease.id).catch((error: unknown) => {
      // Not lost: the store reclaims the lease at its expiry with the units persisted into it.
      book.logger?.warn({ err: error, lease: local.lease.id }, "a usage lease could not be returned");
    }),
  );
  return local.ended;
}

function usable(book: LeaseBook, local: Local, request: UsageRequest, units: bigint): boolean {
  return (
    local.ended === undefined &&
    local.periodStart === request.periodStart &&
    local.periodEnd === request.periodEnd &&
    local.spent + units <= local.lease.units &&
    book.clock.now() < local.grantedAt + book.ttlMs / 2
  );
}

/** Spends `units` of a held lease; `undefined` when the store refused it (the lease is fenced). */
async function spendFrom(book: LeaseBook, local: Local, units: bigint): Promise<Reservation | undefined> {
  const at = local.spent;
  local.spent += units;
  local.inflight++;
  local.lastUsedAt = book.clock.now();
  let taken: boolean;
  try {
    taken = await book.writer.spend(local.lease.id, units);
  } catch (error) {
    local.spent -= units;
    throw error;
  } finally {
    local.inflight--;
    if (local.inflight === 0) local.release?.();
  }
  if (!taken) {
    void end(book, local);
    return undefined;
  }
  if (local.spent >= local.lease.units) void end(book, local);
  return spendReservation(local.lease, at, units);
}

async function acquire(book: LeaseBook, request: UsageRequest): Promise<Reservation> {
  const { held, clock } = book;
  const want = Math.max(request.units * 2, book.wants.get(request.subscriptionId) ?? book.minLease);
  const { lease, reservation } = await book.shared.acquire(request, want, book.ttlMs);
  if (lease !== undefined && !book.closed) {
    const now = clock.now();
    held.set(request.subscriptionId, {
      lease,
      periodStart: request.periodStart,
      periodEnd: request.periodEnd,
      spent: lease.spent,
      inflight: 0,
      grantedAt: now,
      lastUsedAt: now,
      ended: undefined,
      release: undefined,
    });
    startTimer(book);
    if (lease.spent >= lease.units) void end(book, held.get(request.subscriptionId)!);
  } else if (lease !== undefined) {
    await book.shared.release(lease.id);
  }
  return reservation;
}

/** Returns idle and ageing leases, then reclaims expired ones (anyone's). */
async function tick(book: LeaseBook): Promise<void> {
  const now = book.clock.now();
  const ending: Promise<void>[] = [];
  for (const local of book.held.values()) {
    if (now - local.lastUsedAt >= book.idleMs || now - local.grantedAt >= book.ttlMs / 2) {
      ending.push(end(book, local));
    }
  }
  await Promise.all(ending);
  try {
    await book.shared.reclaimExpired(100);
  } catch (error) {
    book.logger?.warn({ err: error }, "expired usage leases could not be reclaimed");
  }
}

/** Persists a use into a lease, with the others in flight; resolves whether the lease took it. */
type SpendWriter = { spend(leaseId: string, units: bigint): Promise<boolean> };

/**
 * Group commit of spends: uses arriving while writes are in flight go out together in the next one,
 * summed per lease, so concurrent requests share one round trip to the store. At most `maxWrites` are
 * in flight, and a lease is in one of them at most, so two writes never wait for each other's row
 * locks (a write locks its leases in whatever order the store's join takes them).
 */
function createSpendWriter(shared: Pick<SharedUsageLedger, "spend">, maxWrites: number): SpendWriter {
  type Waiter = { resolve(taken: boolean): void; reject(error: unknown): void };
  type Entry = { units: bigint; waiters: Waiter[] };
  const queue = new Map<string, Entry>();
  /** Leases in a write in flight: their next uses wait for it. */
  const writing = new Set<string>();
  let writes = 0;
  let scheduled = false;
  const write = async (batch: Map<string, Entry>) => {
    try {
      const taken = await shared.spend([...batch].map(([leaseId, { units }]) => ({ leaseId, units })));
      for (const [leaseId, entry] of batch) for (const w of entry.waiters) w.resolve(taken.has(leaseId));
    } catch (error) {
      for (const entry of batch.values()) for (const w of entry.waiters) w.reject(error);
    } finally {
      for (const leaseId of batch.keys()) writing.delete(leaseId);
      writes--;
      launch();
    }
  };
  const launch = () => {
    scheduled = false;
    while (writes < maxWrites && queue.size > 0) {
      const batch = new Map<string, Entry>();
      for (const [leaseId, entry] of queue) if (!writing.has(leaseId)) batch.set(leaseId, entry);
      if (batch.size === 0) return;
      for (const leaseId of batch.keys()) {
        queue.delete(leaseId);
        writing.add(leaseId);
      }
      writes++;
      void write(batch);
    }
  };
  return {
    spend(leaseId: string, units: bigint): Promise<boolean> {
      return new Promise((resolve, reject) => {
        const entry = queue.get(leaseId) ?? { units: 0n, waiters: [] };
        entry.units += units;
        entry.waiters.push({ resolve, reject });
        queue.set(leaseId, entry);
        if (!scheduled && writes < maxWrites) {
          scheduled = true;
          // Uses of this same turn of the event loop join the first write.
          queueMicrotask(launch);
        }
      });
    },
  };
}
