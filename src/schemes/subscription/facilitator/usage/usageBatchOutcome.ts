/**
 * What a usage batch's transaction did to its records: the outbox handler of kind `usage` (invariant 3
 * of usageSettler.ts). Chain reads happen first; every write then commits in the one store transaction
 * that records the outbox row's outcome, so a batch's outcome is recorded once whatever crashes.
 *
 * - confirmed: each record per its ref's event in the receipt — `AllowanceDeducted` settles it,
 *   `DeductionFailed` fails it (`RefUsed`: settled, by the earlier deduction), no event requeues it.
 * - reverted: nothing moved; the records go back to the queue a bounded number of times.
 * - dropped: the transaction will never be mined; each record's fate is read from the chain's
 *   `AllowanceDeducted` logs for its ref, and records not deducted go back to the queue.
 */
import type { Logger } from "pino";
import { type Address, type Hash, type Log, parseEventLogs } from "viem";
import { getAllowanceDeductedLogs } from "../../../../chain/actions/subscriptions/getAllowanceDeductedLogs.ts";
import { subscriptionManagerAbi } from "../../../../chain/contracts/artifacts/SubscriptionManager.ts";
import { DeductionFailure } from "../../../../chain/events/subscriptionStatus.ts";
import type { FacilitatorContext } from "../../../../facilitator/facilitatorContext.ts";
import type {
  OutboxCommit,
  OutboxHandler,
  OutboxOutcome,
} from "../../../../facilitator/outbox/outboxTypes.ts";
import type { ErrorCode } from "../../../../protocol/errors.ts";
import type { Queryable } from "../../../../store/store.ts";
import {
  batchRows,
  failUsageRecord,
  markBatchConfirmed,
  markBatchFailed,
  requeueBatch,
  requeueUsageRecord,
  resolveDroppedRecord,
  settleUsageRecord,
} from "./usageBatchRecords.ts";

export type UsageOutcomeDeps = {
  store: Queryable;
  client: FacilitatorContext["publicClient"];
  manager: Address;
  logsRange?: number | undefined;
  log: Logger;
};

type ItemOutcome = { ok: true; hash: Hash } | { ok: false; reason: number };

const failureByReason: Record<number, { code: ErrorCode; message: string }> = {
  [DeductionFailure.NotActive]: {
    code: "SubscriptionNotActive",
    message: "the subscription was not active when the deduction was settled",
  },
  [DeductionFailure.AllowanceExhausted]: {
    code: "AllowanceExhausted",
    message: "the deduction would pass the subscription's overage cap for this cycle",
  },
  [DeductionFailure.TransferFailed]: {
    code: "InsufficientFunds",
    message: "the subscriber's balance or allowance did not cover the deduction",
  },
};

export function createUsageOutcomeHandler(deps: UsageOutcomeDeps): OutboxHandler {
  return async (outcome, commit) => {
    const batchId = Number(outcome.owner);
    if (outcome.status === "confirmed") {
      const outcomes = await receiptOutcomes(deps, outcome);
      await commit((tx) => recordReceipt(deps.log, tx, batchId, outcome, outcomes));
    } else if (outcome.status === "reverted") {
      await commit((tx) =>
        requeueBatch(tx, batchId, "ChainUnavailable", "the deduction transaction kept reverting"),
      );
      deps.log.warn({ batch: batchId, tx: outcome.hash }, "usage batch reverted; records requeued");
    } else {
      await recordDropped(deps, batchId, outcome, commit);
    }
  };
}

/**
 * Each ref's outcome in a receipt. An item the contract skipped because the provider deducted under
 * its ref before (`RefUsed`) is a deduction that landed: its record is settled, with the transaction
 * of the earlier deduction when the chain's logs still show it.
 */
async function receiptOutcomes(
  deps: UsageOutcomeDeps,
  receipt: { hash: Hash; logs: Log[] },
): Promise<Map<string, ItemOutcome>> {
  const managerText = deps.manager.toLowerCase();
  const outcomes = new Map<string, ItemOutcome>();
  for (const event of parseEventLogs({ abi: subscriptionManagerAbi, logs: receipt.logs })) {
    if (event.address.toLowerCase() !== managerText) continue;
    if (event.eventName === "AllowanceDeducted") {
      outcomes.set(event.args.ref.toLowerCase(), { ok: true, hash: receipt.hash });
      continue;
    }
    if (event.eventName !== "DeductionFailed") continue;
    const ref = event.args.ref.toLowerCase();
    if (event.args.reason === DeductionFailure.RefUsed) {
      const earlier = await getAllowanceDeductedLogs(deps.client, {
        manager: deps.manager,
        ref: event.args.ref,
        fromBlock: 0n,
        maxRange: deps.logsRange,
      }).catch(() => []);
      outcomes.set(ref, { ok: true, hash: earlier[0]?.transactionHash ?? receipt.hash });
      deps.log.warn(
        { ref, earlier: earlier[0]?.transactionHash },
        "usage ref was deducted before; not again",
      );
    } else {
      outcomes.set(ref, { ok: false, reason: event.args.reason });
    }
  }
  return outcomes;
}

async function recordReceipt(
  log: Logger,
  db: Queryable,
  batchId: number,
  receipt: { hash: Hash; blockNumber: bigint },
  outcomes: ReadonlyMap<string, ItemOutcome>,
): Promise<void> {
  let settled = 0;
  let failed = 0;
  for (const row of await batchRows(db, batchId)) {
    if (row.status !== "submitted") continue;
    const outcome = outcomes.get(row.chain_ref);
    if (outcome?.ok === true) {
      settled++;
      await settleUsageRecord(db, row.id, outcome.hash);
    } else if (outcome !== undefined) {
      failed++;
      const failure = failureByReason[outcome.reason] ?? {
        code: "InvalidRequest",
        message: `the deduction failed (reason ${outcome.reason})`,
      };
      await failUsageRecord(db, row.id, failure, receipt.hash);
    } else {
      // Not in this transaction (it carried fewer items, say after operator checks): queue it again.
      await requeueUsageRecord(db, row.id);
    }
  }
  await markBatchConfirmed(db, batchId, receipt);
  log.info({ batch: batchId, tx: receipt.hash, settled, failed }, "usage batch settled");
}

/** Never mined: each record's fate is read from the chain by its ref; records not deducted go back. */
async function recordDropped(
  deps: UsageOutcomeDeps,
  batchId: number,
  outcome: OutboxOutcome & { status: "dropped" },
  commit: OutboxCommit,
): Promise<void> {
  const rows = (await batchRows(deps.store, batchId)).filter((r) => r.status === "submitted");
  const found = new Map<number, Hash>();
  for (const row of rows) {
    const logs = await getAllowanceDeductedLogs(deps.client, {
      manager: deps.manager,
      ref: row.chain_ref,
      fromBlock: outcome.fromBlock ?? 0n,
      maxRange: deps.logsRange,
    });
    if (logs[0] !== undefined) found.set(row.id, logs[0].transactionHash);
  }
  await commit(async (tx) => {
    for (const row of rows) await resolveDroppedRecord(tx, row.id, found.get(row.id));
    await markBatchFailed(tx, batchId);
  });
}
