/**
 * The renewal keeper's rows (renewalKeeper.ts): which indexed subscriptions are due, whether any could
 * be, and `renewal_attempts`, the failures per period with their back-off.
 */
import type { Address } from "viem";
import { z } from "zod";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../../store/columnSchemas.ts";
import { queryParsed } from "../../../store/queryParsed.ts";
import type { Queryable, Store } from "../../../store/store.ts";

const DueRowSchema = z.object({
  subscription_id: BigintColumnSchema,
  current_period_end: SafeIntColumnSchema,
});
export type DueRow = z.infer<typeof DueRowSchema>;

/** One manager on one chain: the rows a keeper reads and writes. */
export type RenewalScope = { chainId: number; manager: Address };

/**
 * Up to `batchSize` subscriptions due at `chainTime` (by period end, then id), leaving out `exclude`,
 * those whose failures for this period reached `maxAttempts` or whose back-off has not passed, and
 * plans in tokens not among `tokens`.
 */
export function dueRenewals(
  db: Queryable,
  scope: RenewalScope,
  query: {
    chainTime: number;
    exclude: readonly bigint[];
    maxAttempts: number;
    batchSize: number;
    tokens: readonly string[];
  },
): Promise<DueRow[]> {
  return queryParsed(
    db,
    DueRowSchema,
    `SELECT s.subscription_id, s.current_period_end
     FROM subscriptions s
     JOIN plans p ON p.chain_id = s.chain_id AND p.manager = s.manager AND p.plan_id = s.plan_id
     LEFT JOIN renewal_attempts a
       ON a.chain_id = s.chain_id AND a.manager = s.manager AND a.subscription_id = s.subscription_id
     WHERE s.chain_id = $1 AND s.manager = $2 AND s.status IN ('Active', 'PastDue')
       AND s.current_period_end <= $3
       AND (a.subscription_id IS NULL OR a.period_end <> s.current_period_end
            OR (a.failures < $4 AND a.next_attempt_at <= $3))
       AND NOT (s.subscription_id = ANY($6::numeric[]))
       AND p.token = ANY($7::text[])
     ORDER BY s.current_period_end, s.subscription_id
     LIMIT $5`,
    [
      scope.chainId,
      scope.manager.toLowerCase(),
      query.chainTime,
      query.maxAttempts,
      query.batchSize,
      query.exclude.map(String),
      query.tokens,
    ],
  );
}

/** Whether the index holds any subscription a run could renew (else a run would only read the chain). */
export async function anyRenewable(db: Queryable, scope: RenewalScope): Promise<boolean> {
  const rows = await db.query(
    `SELECT 1 FROM subscriptions WHERE chain_id = $1 AND manager = $2 AND status IN ('Active', 'PastDue') LIMIT 1`,
    [scope.chainId, scope.manager.toLowerCase()],
  );
  return rows.length > 0;
}

/**
 * Clears the attempts of renewed ids and counts a failure (with its back-off, `retryAt`) for failed
 * ones, in one transaction: the store's own, or the caller's when `db` is already one.
 */
export async function recordAttempts(
  db: Queryable,
  scope: RenewalScope,
  retryAt: number,
  due: readonly DueRow[],
  renewed: ReadonlySet<string>,
  failed: ReadonlySet<string>,
): Promise<void> {
  await inTransaction(db, async (tx) => {
    for (const row of due) {
      const id = row.subscription_id.toString();
      if (renewed.has(id)) {
        await tx.query(
          "DELETE FROM renewal_attempts WHERE chain_id = $1 AND manager = $2 AND subscription_id = $3",
          [scope.chainId, scope.manager.toLowerCase(), row.subscription_id],
        );
      } else if (failed.has(id)) {
        await tx.query(
          `INSERT INTO renewal_attempts (chain_id, manager, subscription_id, period_end, failures, next_attempt_at)
           VALUES ($1, $2, $3, $4, 1, $5)
           ON CONFLICT (chain_id, manager, subscription_id) DO UPDATE SET
             failures = CASE WHEN renewal_attempts.period_end = EXCLUDED.period_end
                             THEN renewal_attempts.failures + 1 ELSE 1 END,
             period_end = EXCLUDED.period_end, next_attempt_at = EXCLUDED.next_attempt_at, updated_at = now()`,
          [scope.chainId, scope.manager.toLowerCase(), row.subscription_id, row.current_period_end, retryAt],
        );
      }
    }
  });
}

/** Runs `fn` in a transaction: the store's own, or the caller's when `db` is already one. */
function inTransaction(db: Queryable, fn: (tx: Queryable) => Promise<void>): Promise<void> {
  const store = db as Partial<Pick<Store, "transaction">>;
  return typeof store.transaction === "function" ? store.transaction(fn) : fn(db);
}
