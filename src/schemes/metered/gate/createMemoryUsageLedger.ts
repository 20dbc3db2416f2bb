/**
 * A usage ledger for one gate process. Every operation reads and writes its maps without awaiting in
 * between, so on Node's single thread each is atomic; the `async` signatures only match the shared
 * interface. Counts are lost when the process stops (and charges not yet flushed with them): use
 * `createPostgresUsageLedger` when that matters or when several instances serve one API.
 */
import { randomBytes } from "node:crypto";
import type { Clock } from "../../../protocol/clock.ts";
import {
  applyUsage,
  type Reservation,
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
 * const gate = paymentGate({ …, usageLedger: createMemoryUsageLedger({ clock }) });
 */
export function createMemoryUsageLedger(options: { clock: Clock; ledgerId?: string }): UsageLedger {
  const { clock } = options;
  const ledgerId = options.ledgerId ?? randomBytes(16).toString("hex");
  const cycles = new Map<bigint, UsageCycle>();
  /** Batches claimed and not yet marked sent. */
  const claimed = new Map<string, Batch>();
  /** Items not yet resolved, by ref. Invariant: `unsettled` = Σ open amounts + Σ cycle pendings. */
  const open = new Map<string, OpenItem>();
  let unsettled = 0n;
  let nextBatch = 1;

  const reserveNow = (request: UsageRequest): Reservation => {
    const result = applyUsage(cycles.get(request.subscriptionId), unsettled, request);
    if (result.cycle !== undefined) cycles.set(request.subscriptionId, result.cycle);
    unsettled = result.unsettled;
    return result.reservation;
  };

  return {
    reserveNow,
    async reserve(request) {
      return reserveNow(request);
    },

    async claimBatch({ maxItems, staleMs }) {
      const now = clock.now();
      for (const [id, batch] of claimed) {
        if (now - batch.claimedAt >= staleMs) {
          batch.claimedAt = now;
          return { id, items: batch.items.map((item) => ({ ...item })) };
        }
      }
      const id = String(nextBatch);
      const items: UsageBatchItem[] = [];
      for (const [subscriptionId, cycle] of cycles) {
        if (items.length >= maxItems) break;
        if (cycle.pending === 0n) continue;
        items.push({ ref: usageRef(ledgerId, id, subscriptionId), subscriptionId, amount: cycle.pending });
        cycle.pending = 0n;
      }
      if (items.length === 0) return undefined;
      nextBatch++;
      claimed.set(id, { items, claimedAt: now });
      for (const item of items) open.set(item.ref, { ...item, sentAt: undefined });
      return { id, items: items.map((item) => ({ ...item })) };
    },

    async markBatchSent(batchId) {
      const batch = claimed.get(batchId);
      if (batch === undefined) return;
      claimed.delete(batchId);
      const now = clock.now();
      for (const item of batch.items) {
        const entry = open.get(item.ref);
        if (entry !== undefined && entry.sentAt === undefined) entry.sentAt = now;
      }
    },

    async resolve(outcomes) {
      let resolved = 0;
      for (const { ref } of outcomes) {
        const item = open.get(ref);
        if (item === undefined) continue;
        open.delete(ref);
        unsettled -= item.amount;
        resolved++;
      }
      return resolved;
    },

    async unsettled() {
      return unsettled;
    },

    async unresolved({ olderThanMs, limit }) {
      const cutoff = clock.now() - olderThanMs;
      const items: UsageBatchItem[] = [];
      for (const item of open.values()) {
        if (items.length >= limit) break;
        if (item.sentAt !== undefined && item.sentAt <= cutoff) {
          items.push({ ref: item.ref, subscriptionId: item.subscriptionId, amount: item.amount });
        }
      }
      return items;
    },

    async cycle(subscriptionId) {
      const cycle = cycles.get(subscriptionId);
      return cycle === undefined ? undefined : { ...cycle };
    },
  };
}
