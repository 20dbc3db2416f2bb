/**
 * The agent's learned demand per (agent, provider, plan): the evidence of demandEstimate.ts, kept in
 * the agent's store (table `agent_call_demand`, migration 0076) so the running forecast survives a
 * restart and is shared by every process of the agent, or in memory (tests, the bench, no store).
 *
 * Unlike `createCallCounter`, which keeps each call's time for one process, this keeps two decayed
 * numbers per key: constant space, and the same answer whichever process asks.
 *
 * Invariant: every call is recorded once, however it was paid (once, under a subscription, or
 * refused by nobody): the estimate is of demand, not of spend.
 */
import { z } from "zod";
import type { Clock } from "../../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { BigintColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed } from "../../store/queryParsed.ts";
import type { Store } from "../../store/store.ts";
import type { CallKey } from "./createCallCounter.ts";
import { forecastRate, type PolicyForecast } from "./decide.ts";
import { type DemandState, demandModelFor, recordDemand } from "./demandEstimate.ts";

/** What the history holds for one key. */
export type DemandRecord = {
  state: DemandState;
  /** The one-time price last offered beside the plan (smallest units), if any was seen. */
  oneTimePrice: bigint | undefined;
};

export type DemandHistory = {
  /**
   * Records `count` calls (default 1) now, decaying older evidence with the half-life of a plan of
   * `intervalSeconds`; `oneTimePrice` remembers the price the offer named for paying once; `prior`
   * is the planner's forecast in force (the time since the last record is expected at its rate, which
   * is how the forecaster's bias is learned).
   */
  record(
    key: CallKey,
    intervalSeconds: number,
    options?: {
      count?: number | undefined;
      oneTimePrice?: bigint | undefined;
      prior?: PolicyForecast | undefined;
    },
  ): Promise<void>;
  /** The evidence as last recorded (decay it to now with `estimateDemand`), or undefined. */
  get(key: CallKey): Promise<DemandRecord | undefined>;
  /** The history's clock (ms): the time its evidence is recorded and read on. */
  now(): number;
};

const AGENT = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/;
const PLAN = /^(0|[1-9][0-9]{0,77})$/;
const PROVIDER = /^0x[0-9a-fA-F]{40}$/;

type NormalKey = { agent: string; provider: string; planId: string };

function normalize(key: CallKey): NormalKey {
  if (!AGENT.test(key.agent)) {
    throw new TollgateError(ErrorCode.InvalidRequest, "an agent id is 1–128 letters, digits or ._:@-", {
      details: { agent: key.agent.slice(0, 140) },
    });
  }
  if (!PROVIDER.test(key.provider)) {
    throw new TollgateError(ErrorCode.InvalidRequest, "a provider is a 0x address", {
      details: { provider: key.provider.slice(0, 60) },
    });
  }
  const planId = key.planId ?? "";
  if (planId !== "" && !PLAN.test(planId)) {
    throw new TollgateError(ErrorCode.InvalidRequest, "a plan id is a decimal integer", {
      details: { planId: planId.slice(0, 90) },
    });
  }
  return { agent: key.agent, provider: key.provider.toLowerCase(), planId };
}

function assertInterval(seconds: number): void {
  if (!Number.isSafeInteger(seconds) || seconds <= 0) {
    throw new RangeError("intervalSeconds must be a positive integer");
  }
}

const priorRateOf = (prior: PolicyForecast | undefined, intervalSeconds: number) =>
  prior === undefined ? undefined : forecastRate(prior, intervalSeconds);

/** A history in memory: one process, lost on exit. */
export function createMemoryDemandHistory(options: { clock: Clock }): DemandHistory {
  const rows = new Map<string, DemandRecord>();
  const id = (k: NormalKey) => `${k.agent}\n${k.provider}\n${k.planId}`;
  return {
    now: () => options.clock.now(),
    async record(key, intervalSeconds, recordOptions = {}) {
      assertInterval(intervalSeconds);
      const k = id(normalize(key));
      const row = rows.get(k);
      rows.set(k, {
        state: recordDemand(
          row?.state,
          options.clock.now(),
          demandModelFor(intervalSeconds),
          recordOptions.count,
          priorRateOf(recordOptions.prior, intervalSeconds),
        ),
        oneTimePrice: recordOptions.oneTimePrice ?? row?.oneTimePrice,
      });
    },
    async get(key) {
      const row = rows.get(id(normalize(key)));
      return row === undefined ? undefined : { state: { ...row.state }, oneTimePrice: row.oneTimePrice };
    },
  };
}

const RowSchema = z.object({
  calls: z.coerce.number().nonnegative(),
  exposure: z.coerce.number().nonnegative(),
  at_ms: BigintColumnSchema,
  since_ms: BigintColumnSchema,
  expected: z.coerce.number().nonnegative(),
  recent: z.coerce.number().nonnegative(),
  recent_exposure: z.coerce.number().nonnegative(),
  recall: z.coerce.number().nonnegative(),
  recent_arrivals: z.coerce.number().nonnegative(),
  one_time_price: BigintColumnSchema.nullable(),
});

function recordOf(row: z.infer<typeof RowSchema>): DemandRecord {
  return {
    state: {
      calls: row.calls,
      exposure: row.exposure,
      at: Number(row.at_ms),
      since: Number(row.since_ms),
      expected: row.expected,
      recent: row.recent,
      recentExposure: row.recent_exposure,
      recall: row.recall,
      recentArrivals: row.recent_arrivals,
    },
    oneTimePrice: row.one_time_price ?? undefined,
  };
}

/**
 * A history in the agent's store. Each `record` is one transaction that locks the key's row, so calls
 * recorded at once by several processes all count.
 * @example
 * const demand = createDemandHistory({ store, clock: systemClock });
 * await demand.record({ agent, provider, planId }, plan.interval, { oneTimePrice });
 */
export function createDemandHistory(options: { store: Store; clock: Clock }): DemandHistory {
  const { store, clock } = options;
  return {
    now: () => clock.now(),
    async record(key, intervalSeconds, recordOptions = {}) {
      assertInterval(intervalSeconds);
      const k = normalize(key);
      const now = clock.now();
      await store.transaction(async (tx) => {
        // A first call starts the evidence now (no exposure before it).
        await tx.query(
          `INSERT INTO agent_call_demand (agent, provider, plan_id, calls, exposure, at_ms, since_ms)
           VALUES ($1, $2, $3, 0, 0, $4, $4) ON CONFLICT DO NOTHING`,
          [k.agent, k.provider, k.planId, Math.trunc(now)],
        );
        const row = await queryOneParsed(
          tx,
          RowSchema,
          `SELECT calls, exposure, at_ms, since_ms, expected, recent, recent_exposure, recall,
                  recent_arrivals, one_time_price FROM agent_call_demand
           WHERE agent = $1 AND provider = $2 AND plan_id = $3 FOR UPDATE`,
          [k.agent, k.provider, k.planId],
        );
        const before = recordOf(row!);
        const next = recordDemand(
          before.state,
          now,
          demandModelFor(intervalSeconds),
          recordOptions.count,
          priorRateOf(recordOptions.prior, intervalSeconds),
        );
        await tx.query(
          `UPDATE agent_call_demand SET calls = $4, exposure = $5, at_ms = $6,
             one_time_price = COALESCE($7, one_time_price), expected = $8, recent = $9,
             recent_exposure = $10, recall = $11, recent_arrivals = $12
           WHERE agent = $1 AND provider = $2 AND plan_id = $3`,
          [
            k.agent,
            k.provider,
            k.planId,
            next.calls,
            next.exposure,
            Math.trunc(next.at),
            recordOptions.oneTimePrice ?? null,
            next.expected ?? 0,
            next.recent ?? 0,
            next.recentExposure ?? 0,
            next.recall ?? 0,
            next.recentArrivals ?? 0,
          ],
        );
      });
    },
    async get(key) {
      const k = normalize(key);
      const row = await queryOneParsed(
        store,
        RowSchema,
        `SELECT calls, exposure, at_ms, since_ms, expected, recent, recent_exposure, recall,
                  recent_arrivals, one_time_price FROM agent_call_demand
         WHERE agent = $1 AND provider = $2 AND plan_id = $3`,
        [k.agent, k.provider, k.planId],
      );
      return row === undefined ? undefined : recordOf(row);
    },
  };
}
