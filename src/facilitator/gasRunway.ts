/**
 * How long the gas key lasts: its balance divided by what it spent lately, read from the fees its
 * mined transactions paid (`tx_outbox.fee_paid`, recorded with each outcome: outbox/rowReceipts.ts).
 *
 * Invariants:
 * 1. The cost is one `eth_getBalance` and one indexed store read per refresh, and a refresh happens at
 *    start, after outcomes (at most once per `refreshMs`, on one timer that is only set while outcomes
 *    arrive), and when an operator asks for fresh figures (`fresh`, the same at most once per
 *    `refreshMs`). A facilitator at rest reads nothing; a public `/healthz` never causes a read.
 * 2. The pace is the spend of the last `windowMs` (24 h) over the time it covers: from the first
 *    transaction of the window to now, never less than `minSpanMs` (1 h), so a burst just after start
 *    is not spread over a day it did not last.
 * 3. The warning is logged once per episode: when the runway falls under `warnBelowSeconds` (or the
 *    balance is gone), and one line when it is back above.
 */
import type { Logger } from "pino";
import type { Address, PublicClient } from "viem";
import { z } from "zod";
import type { Clock } from "../protocol/clock.ts";
import { BigintColumnSchema, TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Store } from "../store/store.ts";

/** The gas key's runway as last read. */
export type GasRunwayState = {
  /** The key's balance, in wei. */
  balance: bigint;
  /** Fees its mined transactions paid in the window, in wei. */
  spent: bigint;
  /** The time the pace is measured over (seconds): see invariant 2. */
  spanSeconds: number;
  /** Seconds the balance lasts at that pace; `undefined` when nothing was spent in the window. */
  runwaySeconds: number | undefined;
  /** Under the warning threshold, or the balance is gone. */
  low: boolean;
  readAt: Date;
};

export type GasRunway = {
  /** The figures as last read (no read here); `undefined` before the first read. */
  state(): GasRunwayState | undefined;
  /** Figures at most `refreshMs` old: reads them again when older. */
  fresh(): Promise<GasRunwayState | undefined>;
  /** An outcome was recorded: read again once `refreshMs` has passed since the last read. */
  noteOutcome(): void;
  /** The first read (a failure is logged, not thrown: the figures come with the next outcome). */
  start(): Promise<void>;
  stop(): void;
};

export type GasRunwayOptions = {
  store: Store;
  client: Pick<PublicClient, "getBalance">;
  address: Address;
  chainId: number;
  clock: Clock;
  logger: Logger;
  /** Warn when the key lasts less than this (seconds; default 86 400, a day). */
  warnBelowSeconds?: number | undefined;
  /** The window whose spend sets the pace (default 24 h). */
  windowMs?: number | undefined;
  /** The shortest time the pace is measured over (default 1 h). */
  minSpanMs?: number | undefined;
  /** The least time between two reads (default 60 s). */
  refreshMs?: number | undefined;
};

const SpendSchema = z.object({
  spent: BigintColumnSchema,
  first: TimestampColumnSchema.nullable(),
});

/** The options with their defaults filled in, and the logger the runway writes to. */
type RunwaySettings = {
  options: GasRunwayOptions;
  log: Logger;
  warnBelowSeconds: number;
  windowMs: number;
  minSpanMs: number;
  refreshMs: number;
};

export function createGasRunway(options: GasRunwayOptions): GasRunway {
  const { clock } = options;
  const settings: RunwaySettings = {
    options,
    log: options.logger.child({ component: "gas-runway" }),
    warnBelowSeconds: options.warnBelowSeconds ?? 86_400,
    windowMs: options.windowMs ?? 24 * 3_600_000,
    minSpanMs: options.minSpanMs ?? 3_600_000,
    refreshMs: options.refreshMs ?? 60_000,
  };
  const { log, refreshMs } = settings;
  let current: GasRunwayState | undefined;
  let lastRead = Number.NEGATIVE_INFINITY;
  let reading: Promise<GasRunwayState | undefined> | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;

  function refresh(): Promise<GasRunwayState | undefined> {
    reading ??= (async () => {
      lastRead = clock.now();
      try {
        const next = await readRunway(settings);
        reportRunway(settings, current, next);
        current = next;
      } catch (error) {
        log.warn({ err: error }, "could not read the gas key's balance; the runway is read again later");
      }
      return current;
    })().finally(() => {
      reading = undefined;
    });
    return reading;
  }

  return {
    state: () => current,
    fresh() {
      if (clock.now() - lastRead < refreshMs) return reading ?? Promise.resolve(current);
      return refresh();
    },
    noteOutcome() {
      if (stopped || timer !== undefined) return;
      const wait = Math.max(0, lastRead + refreshMs - clock.now());
      timer = setTimeout(() => {
        timer = undefined;
        void refresh();
      }, wait);
      timer.unref?.();
    },
    async start() {
      stopped = false;
      await refresh();
    },
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    },
  };
}

/** One read of the balance and of the window's spend, and the runway they give (invariant 2). */
async function readRunway(settings: RunwaySettings): Promise<GasRunwayState> {
  const { options, windowMs, minSpanMs } = settings;
  const now = options.clock.now();
  const [balance, spend] = await Promise.all([
    options.client.getBalance({ address: options.address }),
    queryOneParsed(
      options.store,
      SpendSchema,
      `SELECT coalesce(sum(fee_paid), 0) AS spent, min(done_at) AS first FROM tx_outbox
       WHERE chain_id = $1 AND sender = $2 AND fee_paid IS NOT NULL AND done_at > $3`,
      [options.chainId, options.address.toLowerCase(), new Date(now - windowMs)],
    ),
  ]);
  const spent = spend?.spent ?? 0n;
  const first = spend?.first?.getTime() ?? now;
  const spanMs = Math.max(minSpanMs, Math.min(windowMs, now - first));
  const runwaySeconds = spent > 0n ? Number((balance * BigInt(spanMs)) / spent) / 1_000 : undefined;
  return {
    balance,
    spent,
    spanSeconds: spanMs / 1_000,
    runwaySeconds,
    low: balance === 0n || (runwaySeconds !== undefined && runwaySeconds < settings.warnBelowSeconds),
    readAt: new Date(now),
  };
}

/** One line when the key starts to run short, one when it no longer does (invariant 3). */
function reportRunway(
  settings: RunwaySettings,
  before: GasRunwayState | undefined,
  now: GasRunwayState,
): void {
  const { log } = settings;
  if (now.low && before?.low !== true) {
    log.warn(
      {
        event: "gas.low",
        address: settings.options.address,
        balance: now.balance.toString(),
        spent: now.spent.toString(),
        spanSeconds: now.spanSeconds,
        runwaySeconds: now.runwaySeconds,
        warnBelowSeconds: settings.warnBelowSeconds,
      },
      now.balance === 0n
        ? "the gas key has no balance left: nothing can be sent; fund it"
        : "the gas key runs dry within the warning threshold at its recent spending: fund it",
    );
  } else if (!now.low && before?.low === true) {
    log.info(
      { event: "gas.ok", balance: now.balance.toString(), runwaySeconds: now.runwaySeconds },
      "the gas key's runway is above the warning threshold again",
    );
  }
}
