/**
 * Waiting on outbox rows (`Outbox.waitFor`, `Outbox.waitForHash`): read the row, its recorded outcome
 * or its hash; when this worker is not running, drive the outbox meanwhile; otherwise wake the worker
 * and wait for its news, reading the store again at least every 250 ms (another instance may be the
 * one driving the row).
 */
import type { PublicClient } from "viem";
import { TollgateError } from "../../protocol/errors.ts";
import type { Store } from "../../store/store.ts";
import { findOutboxRow } from "./outboxRecords.ts";
import type { OutboxOutcome, OutboxSigned } from "./outboxTypes.ts";
import { recordedOutcome } from "./rowReceipts.ts";
import type { WaiterMap } from "./waiterMap.ts";

export type OutboxWaitDeps = {
  store: Store;
  client: Pick<PublicClient, "getTransactionReceipt">;
  outcomeWaiters: WaiterMap<OutboxOutcome>;
  hashWaiters: WaiterMap<OutboxSigned>;
  running(): boolean;
  hasHandler(kind: string): boolean;
  recent(id: number): OutboxOutcome | undefined;
  inFlight(id: number): Promise<void> | undefined;
  wake(): void;
  flush(): Promise<void>;
  signAndSend(): Promise<void>;
};

/**
 * Resolves with what the row's waiters are settled with, or `undefined` after `ms`, whichever comes
 * first; a rejection rejects only with `rejectOnError`.
 */
function nudgeOrTimeout<T>(
  waiters: WaiterMap<T>,
  id: number,
  ms: number,
  rejectOnError: boolean,
): Promise<T | undefined> {
  return new Promise<T | undefined>((resolve, reject) => {
    const timer = setTimeout(() => done(undefined), ms);
    const remove = waiters.add(id, { resolve: done, reject: rejectOnError ? fail : () => done(undefined) });
    function done(value: T | undefined) {
      clearTimeout(timer);
      remove();
      resolve(value);
    }
    function fail(error: unknown) {
      clearTimeout(timer);
      remove();
      reject(error);
    }
  });
}

export async function waitForOutcome(deps: OutboxWaitDeps, id: number): Promise<OutboxOutcome> {
  for (;;) {
    const known = deps.recent(id);
    if (known !== undefined) return known;
    const row = await findOutboxRow(deps.store, id);
    if (row === undefined) throw new TollgateError("NotFound", `no outbox row ${id}`);
    const outcome = await recordedOutcome(deps.client, row);
    if (outcome !== undefined) return outcome;
    const driving = deps.inFlight(id);
    if (driving !== undefined) {
      await driving;
      continue;
    }
    if (!deps.running()) {
      await deps.flush();
      const again = await findOutboxRow(deps.store, id);
      if (again !== undefined && (again.status === "queued" || !deps.hasHandler(again.kind))) {
        throw new TollgateError("Internal", `outbox row ${id} cannot be driven here`);
      }
      continue;
    }
    deps.wake();
    await nudgeOrTimeout(deps.outcomeWaiters, id, 250, false);
  }
}

export async function waitForSigned(deps: OutboxWaitDeps, id: number): Promise<OutboxSigned> {
  for (;;) {
    const row = await findOutboxRow(deps.store, id);
    if (row === undefined) throw new TollgateError("NotFound", `no outbox row ${id}`);
    if (row.status !== "queued" && row.status !== "signed" && row.tx_hash !== null && row.nonce !== null) {
      return { id, hash: row.tx_hash, nonce: row.nonce };
    }
    if (row.status === "dropped") {
      throw new TollgateError("ChainUnavailable", `the transaction was not sent: ${row.failure ?? ""}`, {
        retryAfter: 1,
      });
    }
    if (!deps.running() && deps.inFlight(id) === undefined) await deps.signAndSend();
    deps.wake();
    // The worker's word that it broadcast the row: the row may still read `signed` (a transaction
    // found mined at the first look is not recorded `broadcast`, rowDriver.ts).
    const sent = await nudgeOrTimeout(deps.hashWaiters, id, 250, true);
    if (sent !== undefined) return sent;
  }
}
