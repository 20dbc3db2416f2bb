/**
 * Usage records and batches (migrations 0012, 0013): how a provider's `POST /usage` is stored and how
 * the records read back, through zod.
 */
import { type Address, type Hex, keccak256, toBytes } from "viem";
import { z } from "zod";
import { TollgateError } from "../../../../protocol/errors.ts";
import type { UsageRecord, UsageRecordInput } from "../../../../protocol/subscriptions.ts";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../../../store/queryParsed.ts";
import type { Queryable, Store } from "../../../../store/store.ts";
import type { IndexScope } from "../subscriptionRecords.ts";

const Hash = z.string().regex(/^0x[0-9a-f]{64}$/) as z.ZodType<Hex>;
const AddressText = z.string().regex(/^0x[0-9a-f]{40}$/) as z.ZodType<Address>;

export const UsageRowSchema = z.object({
  id: SafeIntColumnSchema,
  provider: AddressText,
  ref: z.string(),
  chain_ref: Hash,
  subscription_id: BigintColumnSchema,
  amount: BigintColumnSchema,
  status: z.enum(["pending", "submitted", "settled", "failed"]),
  batch_id: SafeIntColumnSchema.nullable(),
  attempts: z.number().int(),
  tx_hash: Hash.nullable(),
  failure_code: z.string().nullable(),
  failure_message: z.string().nullable(),
});
export type UsageRow = z.infer<typeof UsageRowSchema>;

export const UsageBatchRowSchema = z.object({
  id: SafeIntColumnSchema,
  status: z.enum(["pending", "submitted", "confirmed", "failed"]),
  sender: AddressText.nullable(),
  sender_nonce: SafeIntColumnSchema.nullable(),
  tx_hash: Hash.nullable(),
  raw_tx: z.string().nullable(),
  from_block: BigintColumnSchema.nullable(),
  item_count: z.number().int(),
});
export type UsageBatchRow = z.infer<typeof UsageBatchRowSchema>;

/**
 * The bytes32 `ref` passed to deductAllowanceMany for a provider's record: keccak256 of
 * `tollgate-usage:<provider lowercase>:<ref>`, so two providers' refs never collide on chain and a
 * record's outcome can be found by its ref topic.
 */
export function chainRefOf(provider: Address, ref: string): Hex {
  return keccak256(toBytes(`tollgate-usage:${provider.toLowerCase()}:${ref}`));
}

export function usageToWire(row: UsageRow): UsageRecord {
  return {
    ref: row.ref,
    subscriptionId: row.subscription_id.toString(),
    amount: row.amount.toString(),
    status: row.status,
    transaction: row.tx_hash,
    failure:
      row.failure_code === null
        ? null
        : { code: row.failure_code, message: row.failure_message ?? row.failure_code },
  };
}

/**
 * Stores a provider's records, each once per (provider, ref), in one transaction. A ref already
 * recorded with the same subscription and amount is a duplicate (returned as stored); with different
 * ones it is a conflict (`NonceAlreadyUsed`, 409), and nothing of the request is stored.
 */
export async function recordUsage(
  db: Pick<Store, "transaction">,
  scope: IndexScope,
  provider: Address,
  records: readonly UsageRecordInput[],
): Promise<{ row: UsageRow; duplicate: boolean }[]> {
  const owner = provider.toLowerCase();
  return db.transaction(async (tx) => {
    const out: { row: UsageRow; duplicate: boolean }[] = [];
    for (const record of records) {
      // No conflict target: the row has two unique keys, (provider, ref) and its hash `chain_ref`, and
      // two inserts of one ref racing past each other's first check meet on whichever index comes
      // second; with a target naming only the first, the other ended in a unique violation (a 500).
      // Both keys say the same thing, so either conflict means "already recorded".
      const inserted = await queryOneParsed(
        tx,
        UsageRowSchema,
        `INSERT INTO usage_records (chain_id, manager, provider, ref, chain_ref, subscription_id, amount)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT DO NOTHING RETURNING *`,
        [
          scope.chainId,
          scope.manager.toLowerCase(),
          owner,
          record.ref,
          chainRefOf(provider, record.ref),
          record.subscriptionId,
          record.amount,
        ],
      );
      if (inserted !== undefined) {
        out.push({ row: inserted, duplicate: false });
        continue;
      }
      const existing = await findUsageByRefs(tx, scope, provider, [record.ref]);
      const row = existing[0];
      if (row === undefined) throw new TollgateError("Internal", "a conflicting usage record vanished");
      if (row.subscription_id !== BigInt(record.subscriptionId) || row.amount !== BigInt(record.amount)) {
        throw new TollgateError(
          "NonceAlreadyUsed",
          `usage ref ${JSON.stringify(record.ref)} was already recorded with another subscription or amount`,
          { details: { ref: record.ref, recorded: usageToWire(row) } },
        );
      }
      out.push({ row, duplicate: true });
    }
    return out;
  });
}

export function findUsageByRefs(
  db: Queryable,
  scope: IndexScope,
  provider: Address,
  refs: readonly string[],
): Promise<UsageRow[]> {
  return queryParsed(
    db,
    UsageRowSchema,
    `SELECT * FROM usage_records WHERE chain_id = $1 AND manager = $2 AND provider = $3 AND ref = ANY($4::text[])
     ORDER BY id`,
    [scope.chainId, scope.manager.toLowerCase(), provider.toLowerCase(), [...refs]],
  );
}

const TotalsRowSchema = z.object({
  status: z.string(),
  count: SafeIntColumnSchema,
  amount: BigintColumnSchema,
});

/** Count and sum of a provider's records for one subscription, by status. */
export async function usageTotals(
  db: Queryable,
  scope: IndexScope,
  provider: Address,
  subscriptionId: bigint,
): Promise<Record<"pending" | "submitted" | "settled" | "failed", { count: number; amount: bigint }>> {
  const rows = await queryParsed(
    db,
    TotalsRowSchema,
    `SELECT status, count(*) AS count, coalesce(sum(amount), 0) AS amount FROM usage_records
     WHERE chain_id = $1 AND manager = $2 AND provider = $3 AND subscription_id = $4 GROUP BY status`,
    [scope.chainId, scope.manager.toLowerCase(), provider.toLowerCase(), subscriptionId],
  );
  const totals = {
    pending: { count: 0, amount: 0n },
    submitted: { count: 0, amount: 0n },
    settled: { count: 0, amount: 0n },
    failed: { count: 0, amount: 0n },
  };
  for (const row of rows) {
    if (row.status in totals)
      totals[row.status as keyof typeof totals] = { count: row.count, amount: row.amount };
  }
  return totals;
}
