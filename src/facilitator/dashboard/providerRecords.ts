/**
 * Read-only views of one provider's rows for the dashboard: its recent one-time payments (settled and
 * failed) and payers, and its recent events of some types (failed renewals). Every query is scoped to
 * the provider.
 */
import { z } from "zod";
import { BigintColumnSchema, SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";

/** Rows shown per table: the dashboard pages, it does not export. */
export const DASHBOARD_ROW_LIMIT = 200;

const PaymentRowSchema = z.object({
  payer: z.string(),
  token: z.string(),
  amount: BigintColumnSchema,
  tx_hash: z.string().nullable(),
  settled_at: TimestampColumnSchema,
});
export type ProviderPayment = z.infer<typeof PaymentRowSchema>;

/** Settled one-time payments to the provider, newest first. */
export function recentPayments(db: Queryable, provider: string): Promise<ProviderPayment[]> {
  return queryParsed(
    db,
    PaymentRowSchema,
    `SELECT payer, token, amount, tx_hash, settled_at FROM payments
     WHERE pay_to = $1 AND status = 'settled' ORDER BY settled_at DESC LIMIT ${DASHBOARD_ROW_LIMIT}`,
    [provider.toLowerCase()],
  );
}

const FailedPaymentRowSchema = z.object({
  payer: z.string(),
  amount: BigintColumnSchema,
  tx_hash: z.string().nullable(),
  failure_code: z.string().nullable(),
  failure_message: z.string().nullable(),
  failed_at: TimestampColumnSchema,
});
export type FailedPayment = z.infer<typeof FailedPaymentRowSchema>;

/**
 * One-time payments to the provider that failed on chain (the token or the settler refused the
 * transfer), newest first. A refusal before settlement (a bad signature at /authorize) writes no row,
 * so it is not among them.
 */
export function failedPayments(db: Queryable, provider: string): Promise<FailedPayment[]> {
  return queryParsed(
    db,
    FailedPaymentRowSchema,
    `SELECT payer, amount, tx_hash, failure_code, failure_message, updated_at AS failed_at FROM payments
     WHERE pay_to = $1 AND status = 'failed' ORDER BY updated_at DESC, id DESC LIMIT ${DASHBOARD_ROW_LIMIT}`,
    [provider.toLowerCase()],
  );
}

const RouteRevenueRowSchema = z.object({
  method: z.string().nullable(),
  path: z.string().nullable(),
  payments: SafeIntColumnSchema,
  volume: BigintColumnSchema,
});
export type RouteRevenue = z.infer<typeof RouteRevenueRowSchema>;

/**
 * Settled one-time revenue in [from, to) by the route paid for, largest first, counted as the
 * analytics count it (amounts above zero, in `token` when given). The route is the
 * method and path the gate sealed in the memo's claims (`m`, `p`; the memo's first part is their
 * base64url JSON); an x402 payment carries no memo, so its route is null. The facilitator does not
 * check a memo's claims, so they are read without a cast that could fail: decoded to escaped text
 * and matched by pattern, a memo that is not the gate's leaving its route null.
 */
export function revenueByRoute(
  db: Queryable,
  provider: string,
  range: { from: Date; to: Date; token?: string | undefined },
): Promise<RouteRevenue[]> {
  return queryParsed(
    db,
    RouteRevenueRowSchema,
    `WITH paid AS (
       SELECT amount, split_part(memo, '.', 1) AS claims
       FROM payments WHERE pay_to = $1 AND status = 'settled' AND settled_at >= $2 AND settled_at < $3
         AND amount > 0 AND ($4::text IS NULL OR token = $4)
     ), decoded AS (
       SELECT amount, CASE WHEN claims ~ '^[A-Za-z0-9_-]+$' AND length(claims) % 4 <> 1
         THEN encode(decode(rpad(translate(claims, '-_', '+/'), (length(claims) + 3) / 4 * 4, '='), 'base64'), 'escape')
       END AS json FROM paid
     )
     SELECT substring(json FROM '"m":"([A-Z]{1,16})"') AS method, substring(json FROM '"p":"(/[^"]*)"') AS path,
       count(*) AS payments, sum(amount) AS volume
     FROM decoded GROUP BY 1, 2 ORDER BY sum(amount) DESC, 1, 2 LIMIT ${DASHBOARD_ROW_LIMIT}`,
    [provider.toLowerCase(), range.from, range.to, range.token?.toLowerCase() ?? null],
  );
}

const PayerRowSchema = z.object({
  payer: z.string(),
  payments: SafeIntColumnSchema,
  volume: BigintColumnSchema,
  last_at: TimestampColumnSchema,
});
export type ProviderPayer = z.infer<typeof PayerRowSchema>;

/** The provider's one-time payers with their payment count and volume, largest volume first. */
export function topPayers(db: Queryable, provider: string): Promise<ProviderPayer[]> {
  return queryParsed(
    db,
    PayerRowSchema,
    `SELECT payer, count(*) AS payments, sum(amount) AS volume, max(settled_at) AS last_at FROM payments
     WHERE pay_to = $1 AND status = 'settled' AND amount > 0
     GROUP BY payer ORDER BY sum(amount) DESC, payer LIMIT ${DASHBOARD_ROW_LIMIT}`,
    [provider.toLowerCase()],
  );
}

const EventRowSchema = z.object({
  id: SafeIntColumnSchema,
  type: z.string(),
  data: z.record(z.string(), z.unknown()),
  created_at: TimestampColumnSchema,
});
export type ProviderEvent = z.infer<typeof EventRowSchema>;

/** The provider's latest events of the given types, newest first. */
export function recentEventsOf(
  db: Queryable,
  provider: string,
  types: readonly string[],
): Promise<ProviderEvent[]> {
  return queryParsed(
    db,
    EventRowSchema,
    `SELECT id, type, data, created_at FROM events
     WHERE type = ANY($2::text[]) AND lower(data ->> 'provider') = $1
     ORDER BY id DESC LIMIT ${DASHBOARD_ROW_LIMIT}`,
    [provider.toLowerCase(), [...types]],
  );
}
