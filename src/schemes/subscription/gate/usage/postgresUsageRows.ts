/**
 * Rows of the PostgreSQL usage ledger's tables (migrations 0050 and 0103), read through zod, and the
 * shapes the ledger hands back. Schemas are built once (a zod object schema compiles its parser on
 * first use).
 */
import { z } from "zod";
import { BigintColumnSchema, SafeIntColumnSchema } from "../../../../store/columnSchemas.ts";
import type { SharedCycle } from "./usageLeases.ts";
import type { UsageBatchItem, UsageCycle } from "./usageLedger.ts";

export const CycleRowSchema = z.object({
  period_start: SafeIntColumnSchema,
  period_end: SafeIntColumnSchema,
  units: BigintColumnSchema,
  overage: BigintColumnSchema,
  pending: BigintColumnSchema,
  leased: BigintColumnSchema,
  epoch: SafeIntColumnSchema,
});

export const CYCLE_COLUMNS = "period_start, period_end, units, overage, pending, leased, epoch";

export const LeaseRowSchema = z.object({
  subscription_id: BigintColumnSchema,
  epoch: SafeIntColumnSchema,
  units: BigintColumnSchema,
  spent: BigintColumnSchema,
  base: BigintColumnSchema,
  included_units: BigintColumnSchema,
  unit_price: BigintColumnSchema,
  worst: BigintColumnSchema,
});

/** Rows of one or two columns. */
export const IdRowSchema = z.object({ id: BigintColumnSchema });
export const SerialRowSchema = z.object({ id: SafeIntColumnSchema });
export const UnitsRowSchema = z.object({ units: BigintColumnSchema });
export const UnsettledRowSchema = z.object({ unsettled: BigintColumnSchema });
export const CountRowSchema = z.object({ n: SafeIntColumnSchema });
export const WrittenRowSchema = z.object({ ok: z.boolean() });
export const LedgerIdRowSchema = z.object({ ledger_id: z.string() });
export const PendingRowSchema = z.object({
  subscription_id: BigintColumnSchema,
  pending: BigintColumnSchema,
});
/** The cycle row locked by `lockCycle`, with the ledger's exposure as this transaction's snapshot saw it. */
export const LockedCycleRowSchema = CycleRowSchema.extend({ ledger_unsettled: BigintColumnSchema });

export const EndedLeaseRowSchema = LeaseRowSchema.extend({ id: BigintColumnSchema });
export const KeyedCycleRowSchema = CycleRowSchema.extend({ subscription_id: BigintColumnSchema });

export const ItemRowSchema = z.object({
  ref: z.string(),
  subscription_id: BigintColumnSchema,
  amount: BigintColumnSchema,
});

export const cycleOf = (row: z.output<typeof CycleRowSchema>): SharedCycle => ({
  periodStart: row.period_start,
  periodEnd: row.period_end,
  units: row.units,
  overage: row.overage,
  pending: row.pending,
  leased: row.leased,
  epoch: row.epoch,
});

export const publicCycle = ({ leased: _l, epoch: _e, ...cycle }: SharedCycle): UsageCycle => cycle;

export function itemOf(row: z.output<typeof ItemRowSchema>): UsageBatchItem {
  return { ref: row.ref, subscriptionId: row.subscription_id, amount: row.amount };
}
