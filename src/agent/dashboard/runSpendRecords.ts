/**
 * An agent run's spend events in the agents' store (migration 0101), so the dashboard can show spend
 * over time by tool, seller and mode, the policy's reasons and the latest run's spend report after the
 * run has ended. `tollgate run` and the demo record through `startRunRecording`; the report is rebuilt
 * with the same collector the run printed (src/agent/spendReport.ts), so both agree.
 *
 * Recording never fails a run: events are written in order in the background and a write that fails
 * is logged and dropped (the budget ledger, not this table, is the record of money).
 */
import { randomBytes } from "node:crypto";
import { z } from "zod";
import type { Clock } from "../../protocol/clock.ts";
import { BigintColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";
import type { PolicyOffer } from "../policy/policyOffer.ts";
import { PolicyOfferSchema } from "../policy/policyOffer.ts";
import { createSpendCollector, type SpendEvent, type SpendReport } from "../spendReport.ts";

export type RunRecording = {
  runId: string;
  /** Queues one event for the store (in call order). */
  record(event: SpendEvent): void;
  /** Waits for the queued events and marks the run finished. */
  finish(): Promise<void>;
};

const clip = (text: string | undefined, max: number) =>
  text === undefined ? null : text.length > max ? `${text.slice(0, max - 1)}…` : text;

/** Serializes a policy offer with its bigints as decimal strings (read back by `offerOf`). */
function offerJson(offer: PolicyOffer | undefined): Record<string, unknown> | null {
  if (offer === undefined) return null;
  return JSON.parse(JSON.stringify(offer, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v)));
}

const OfferJsonSchema = z
  .object({
    provider: z.string(),
    oneTime: z.object({ amount: z.string().regex(/^[0-9]+$/) }).optional(),
    subscription: z
      .object({
        planId: z.string().optional(),
        amount: z.string().regex(/^[0-9]+$/),
        interval: z.number(),
        includedUnits: z.number().optional(),
        overageUnitPrice: z
          .string()
          .regex(/^[0-9]+$/)
          .optional(),
      })
      .optional(),
  })
  .transform((o) =>
    PolicyOfferSchema.safeParse({
      provider: o.provider,
      ...(o.oneTime === undefined ? {} : { oneTime: { amount: BigInt(o.oneTime.amount) } }),
      ...(o.subscription === undefined
        ? {}
        : {
            subscription: {
              ...(o.subscription.planId === undefined ? {} : { planId: o.subscription.planId }),
              amount: BigInt(o.subscription.amount),
              interval: o.subscription.interval,
              includedUnits: o.subscription.includedUnits ?? 0,
              overageUnitPrice: BigInt(o.subscription.overageUnitPrice ?? "0"),
            },
          }),
    }),
  );

/** Starts recording a run of `agent`; the run row is written before the first event. */
export function startRunRecording(
  db: Queryable,
  options: { agent: string; clock: Clock; onError?: ((error: unknown) => void) | undefined; runId?: string },
): RunRecording {
  const runId = options.runId ?? `run_${randomBytes(12).toString("base64url")}`;
  const onError = options.onError ?? (() => {});
  let seq = 0;
  let chain: Promise<void> = db
    .query("INSERT INTO agent_runs (run_id, agent, started_at) VALUES ($1, $2, $3)", [
      runId,
      options.agent,
      new Date(options.clock.now()),
    ])
    .then(
      () => {},
      (error: unknown) => onError(error),
    );
  return {
    runId,
    record(event) {
      const at = new Date(options.clock.now());
      const n = seq++;
      chain = chain.then(() =>
        db
          .query(
            `INSERT INTO agent_run_spends (run_id, seq, agent, at, tool, provider, mode, amount, ok, reason, error,
               offer, transaction, subscription_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
            [
              runId,
              n,
              options.agent,
              at,
              clip(event.tool, 256),
              clip(event.provider, 256),
              event.mode,
              event.amount,
              event.ok,
              clip(event.reason, 2000),
              clip(event.error, 2000),
              offerJson(event.offer),
              clip(event.transaction, 100),
              clip(event.subscriptionId, 100),
            ],
          )
          .then(
            () => {},
            (error: unknown) => onError(error),
          ),
      );
    },
    async finish() {
      await chain;
      await db
        .query("UPDATE agent_runs SET finished_at = $2 WHERE run_id = $1", [
          runId,
          new Date(options.clock.now()),
        ])
        .catch(onError);
    },
  };
}

const SpendRowSchema = z.object({
  run_id: z.string(),
  at: TimestampColumnSchema,
  tool: z.string(),
  provider: z.string(),
  mode: z.enum(["one-time", "subscription", "metered", "channel", "free"]),
  amount: BigintColumnSchema,
  ok: z.boolean(),
  reason: z.string().nullable(),
  error: z.string().nullable(),
  offer: z.unknown().nullable(),
  transaction: z.string().nullable(),
  subscription_id: z.string().nullable(),
});
export type RunSpendRow = z.infer<typeof SpendRowSchema>;

/** The agent's recorded spend events since `since`, oldest first (at most `limit`). */
export function spendEventsOf(
  db: Queryable,
  agent: string,
  since: Date,
  limit = 5_000,
): Promise<RunSpendRow[]> {
  return queryParsed(
    db,
    SpendRowSchema,
    `SELECT run_id, at, tool, provider, mode, amount, ok, reason, error, offer, transaction, subscription_id
     FROM agent_run_spends WHERE agent = $1 AND at >= $2 ORDER BY at, run_id, seq LIMIT $3`,
    [agent, since, limit],
  );
}

const RunRowSchema = z.object({
  run_id: z.string(),
  started_at: TimestampColumnSchema,
  finished_at: TimestampColumnSchema.nullable(),
});
export type AgentRun = z.infer<typeof RunRowSchema>;

/** The agent's latest run and its spend report, rebuilt from the recorded events. */
export async function latestRunReport(
  db: Queryable,
  agent: string,
): Promise<{ run: AgentRun; report: SpendReport } | undefined> {
  const run = await queryOneParsed(
    db,
    RunRowSchema,
    "SELECT run_id, started_at, finished_at FROM agent_runs WHERE agent = $1 ORDER BY started_at DESC, run_id LIMIT 1",
    [agent],
  );
  if (run === undefined) return undefined;
  const rows = await queryParsed(
    db,
    SpendRowSchema,
    `SELECT run_id, at, tool, provider, mode, amount, ok, reason, error, offer, transaction, subscription_id
     FROM agent_run_spends WHERE run_id = $1 ORDER BY seq`,
    [run.run_id],
  );
  const collector = createSpendCollector();
  for (const row of rows) collector.record(eventOf(row));
  return { run, report: collector.report() };
}

/** A stored row as the spend event it was. */
export function eventOf(row: RunSpendRow): SpendEvent {
  const offer = row.offer === null ? undefined : OfferJsonSchema.safeParse(row.offer);
  return {
    tool: row.tool,
    provider: row.provider,
    mode: row.mode,
    amount: row.amount,
    ok: row.ok,
    ...(row.reason === null ? {} : { reason: row.reason }),
    ...(row.error === null ? {} : { error: row.error }),
    ...(offer?.success === true && offer.data.success ? { offer: offer.data.data } : {}),
    ...(row.transaction === null ? {} : { transaction: row.transaction }),
    ...(row.subscription_id === null ? {} : { subscriptionId: row.subscription_id }),
  };
}
