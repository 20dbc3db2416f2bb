/**
 * Seller liveness (docs/market.md, "Liveness"): the market reads each registered seller's discovery
 * document on a schedule, and sooner when a buyer reports that a call failed; a seller that stops
 * answering is marked unreachable and left out of catalog searches until it answers again.
 *
 * Invariants:
 * - A check is claimed in the store before the seller is fetched (`next_check_at` moved past the
 *   check's lease, `checked_at` set), so several market instances, a sweep and any number of reports
 *   fetch one seller at most once per claim: a seller is never hammered on the market's behalf.
 * - Reports cost at most one check per seller per `reportIntervalSeconds`, whoever sends them, and at
 *   most `reportConcurrency` report checks run at once per market process (more reports are answered
 *   with the known status and left to the schedule); a report never marks a seller by itself, only
 *   the market's own check does, so a competitor cannot delist a seller that answers.
 * - A result is recorded only if the seller still has the `baseUrl` that was checked: a registration
 *   that moved the seller meanwhile starts afresh (registration resets liveness, see marketRegistry).
 * - Checked: an answer 2xx whose body is a discovery document (signed or bare) of this very seller.
 *   A server at the URL that answers for someone else is not this seller.
 */
import type { Address } from "viem";
import { z } from "zod";
import { sameAddress } from "../protocol/address.ts";
import type { Clock } from "../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../protocol/errors.ts";
import { MANIFEST_PATH, parseDiscoveryDocument } from "../protocol/manifest.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../store/queryParsed.ts";
import type { Store } from "../store/store.ts";
import type { SellerDocumentFetcher } from "./fetchSellerDocument.ts";

/** Built once: a zod object schema compiles its parser on first use. */
const DueSellerRowSchema = z.object({ address: z.string(), base_url: z.string() });

export type SellerLivenessOptions = {
  /** Seconds between checks of a seller that answers (default 300). */
  checkIntervalSeconds?: number | undefined;
  /** Consecutive failed checks that mark a seller unreachable (default 2). */
  unreachableAfterFailures?: number | undefined;
  /** First retry after a failed check, in seconds; doubles per further failure (default 30). */
  retryBaseSeconds?: number | undefined;
  /** Longest wait between checks of a failing seller, in seconds (default 3600). */
  retryMaxSeconds?: number | undefined;
  /** Shortest time between two checks caused by reports, per seller, in seconds (default 30). */
  reportIntervalSeconds?: number | undefined;
  /** Checks caused by reports that may run at once (default 4). */
  reportConcurrency?: number | undefined;
  /** Sellers checked per sweep (default 20) and at once (default 4). */
  sweepSize?: number | undefined;
  sweepConcurrency?: number | undefined;
};

/** A seller's liveness as the market knows it. Times are Unix seconds. */
export type SellerLivenessStatus = {
  address: Address;
  reachable: boolean;
  /** Consecutive failed checks. */
  failures: number;
  checkedAt?: number | undefined;
  unreachableSince?: number | undefined;
  /** Why the last check failed (`connection`, `timeout`, `http_503`, `refused_target`, …). */
  lastError?: string | undefined;
};

export type SellerLiveness = {
  /** Checks up to `sweepSize` sellers whose check is due; resolves with their new status. */
  sweep(): Promise<SellerLivenessStatus[]>;
  /**
   * A buyer's report that calls to `address` fail: checks the seller now unless it was checked less
   * than `reportIntervalSeconds` ago. `checked` says whether this report caused a check.
   */
  report(address: Address): Promise<SellerLivenessStatus & { checked: boolean }>;
};

const DEFAULTS = {
  checkIntervalSeconds: 300,
  unreachableAfterFailures: 2,
  retryBaseSeconds: 30,
  retryMaxSeconds: 3600,
  reportIntervalSeconds: 30,
  reportConcurrency: 4,
  sweepSize: 20,
  sweepConcurrency: 4,
};

/** How long a claimed check owns its seller before another checker may take it over. */
const CLAIM_LEASE_SECONDS = 120;

const LivenessRowSchema = z.object({
  address: z.string(),
  base_url: z.string().nullable(),
  removed_at: TimestampColumnSchema.nullable(),
  check_failures: SafeIntColumnSchema,
  checked_at: TimestampColumnSchema.nullable(),
  unreachable_since: TimestampColumnSchema.nullable(),
  last_check_error: z.string().nullable(),
});
type LivenessRow = z.infer<typeof LivenessRowSchema>;

const LIVENESS_COLUMNS =
  "address, base_url, removed_at, check_failures, checked_at, unreachable_since, last_check_error";

const seconds = (date: Date) => Math.floor(date.getTime() / 1000);

function positive(value: number | undefined, fallback: number, name: string): number {
  const result = value ?? fallback;
  if (!Number.isSafeInteger(result) || result < 1) {
    throw new TollgateError("InvalidRequest", `${name} must be a positive integer`, {
      details: { [name]: value },
    });
  }
  return result;
}

/** The columns a status is read from. */
export type LivenessColumns = Pick<
  LivenessRow,
  "address" | "check_failures" | "checked_at" | "unreachable_since" | "last_check_error"
>;

/** The status of a stored row. */
export function livenessStatusOf(row: LivenessColumns): SellerLivenessStatus {
  return {
    address: row.address as Address,
    reachable: row.unreachable_since === null,
    failures: row.check_failures,
    ...(row.checked_at === null ? {} : { checkedAt: seconds(row.checked_at) }),
    ...(row.unreachable_since === null ? {} : { unreachableSince: seconds(row.unreachable_since) }),
    ...(row.last_check_error === null ? {} : { lastError: row.last_check_error }),
  };
}

/** A liveness checker's limits, checked once from its options, with its store, clock and fetch. */
type LivenessContext = {
  store: Store;
  clock: Clock;
  fetchDocument: SellerDocumentFetcher;
  interval: number;
  threshold: number;
  retryBase: number;
  retryMax: number;
  reportInterval: number;
  sweepSize: number;
  reportConcurrency: number;
  concurrency: number;
  /** The clock moved by `offsetSeconds`. */
  at(offsetSeconds: number): Date;
};

function livenessContext(
  options: SellerLivenessOptions & { store: Store; clock: Clock; fetchDocument: SellerDocumentFetcher },
): LivenessContext {
  const { store, clock, fetchDocument } = options;
  const interval = positive(
    options.checkIntervalSeconds,
    DEFAULTS.checkIntervalSeconds,
    "checkIntervalSeconds",
  );
  const threshold = positive(
    options.unreachableAfterFailures,
    DEFAULTS.unreachableAfterFailures,
    "unreachableAfterFailures",
  );
  const retryBase = positive(options.retryBaseSeconds, DEFAULTS.retryBaseSeconds, "retryBaseSeconds");
  const retryMax = positive(options.retryMaxSeconds, DEFAULTS.retryMaxSeconds, "retryMaxSeconds");
  const reportInterval = positive(
    options.reportIntervalSeconds,
    DEFAULTS.reportIntervalSeconds,
    "reportIntervalSeconds",
  );
  const sweepSize = positive(options.sweepSize, DEFAULTS.sweepSize, "sweepSize");
  const reportConcurrency = positive(
    options.reportConcurrency,
    DEFAULTS.reportConcurrency,
    "reportConcurrency",
  );
  const concurrency = positive(options.sweepConcurrency, DEFAULTS.sweepConcurrency, "sweepConcurrency");
  const at = (offsetSeconds: number) => new Date(clock.now() + offsetSeconds * 1000);
  return {
    store,
    clock,
    fetchDocument,
    interval,
    threshold,
    retryBase,
    retryMax,
    reportInterval,
    sweepSize,
    reportConcurrency,
    concurrency,
    at,
  };
}

/** Fetches the seller's document: `undefined` when it answered as itself, else the failure reason. */
async function probe(
  fetchDocument: SellerDocumentFetcher,
  address: string,
  baseUrl: string,
): Promise<string | undefined> {
  try {
    const document = await fetchDocument(`${baseUrl.replace(/\/+$/, "")}${MANIFEST_PATH}`);
    const { manifest } = parseDiscoveryDocument(document);
    return sameAddress(manifest.seller.payTo, address) ? undefined : "wrong_seller";
  } catch (error) {
    if (!isTollgateError(error)) return "unreachable";
    const failure = error.details?.failure;
    if (typeof failure === "string") return failure.slice(0, 64);
    const reason = error.details?.reason;
    if (reason === "refused_target") return "refused_target";
    return "malformed_document";
  }
}

/** Stores a check's outcome, if the seller still has the checked `baseUrl`. */
async function record(ctx: LivenessContext, address: string, baseUrl: string, failure: string | undefined) {
  const { at } = ctx;
  return ctx.store.transaction(async (tx) => {
    const row = await queryOneParsed(
      tx,
      LivenessRowSchema,
      `SELECT ${LIVENESS_COLUMNS} FROM market_sellers WHERE address = $1 FOR UPDATE`,
      [address],
    );
    if (row === undefined || row.removed_at !== null || row.base_url !== baseUrl) return undefined;
    const now = at(0);
    if (failure === undefined) {
      const updated = await queryOneParsed(
        tx,
        LivenessRowSchema,
        `UPDATE market_sellers
            SET checked_at = $2, check_failures = 0, unreachable_since = NULL, last_check_error = NULL,
                next_check_at = $3
          WHERE address = $1 RETURNING ${LIVENESS_COLUMNS}`,
        [address, now, at(ctx.interval)],
      );
      return updated;
    }
    const failures = row.check_failures + 1;
    // Back-off: retryBase, 2×, 4×, … up to retryMax, so a seller that is gone costs little and one
    // that comes back is noticed within retryMax at worst (sooner on a report).
    const wait = Math.min(ctx.retryMax, ctx.retryBase * 2 ** Math.min(failures - 1, 30));
    return queryOneParsed(
      tx,
      LivenessRowSchema,
      `UPDATE market_sellers
          SET checked_at = $2, check_failures = $3::integer, last_check_error = $4, next_check_at = $5,
              unreachable_since = CASE WHEN $3::integer >= $6::integer THEN coalesce(unreachable_since, $2)
                                       ELSE unreachable_since END
        WHERE address = $1 RETURNING ${LIVENESS_COLUMNS}`,
      [address, now, failures, failure, at(wait), ctx.threshold],
    );
  });
}

async function check(
  ctx: LivenessContext,
  address: string,
  baseUrl: string,
): Promise<SellerLivenessStatus | undefined> {
  const failure = await probe(ctx.fetchDocument, address, baseUrl);
  const row = await record(ctx, address, baseUrl, failure);
  return row === undefined ? undefined : livenessStatusOf(row);
}

/** Claims up to `sweepSize` sellers whose check is due, then checks them `concurrency` at a time. */
async function sweep(ctx: LivenessContext): Promise<SellerLivenessStatus[]> {
  const { at } = ctx;
  const now = at(0);
  const claimed = await queryParsed(
    ctx.store,
    DueSellerRowSchema,
    `UPDATE market_sellers SET next_check_at = $2, checked_at = $1
      WHERE address IN (SELECT address FROM market_sellers
                         WHERE removed_at IS NULL AND (next_check_at IS NULL OR next_check_at <= $1)
                         ORDER BY next_check_at NULLS FIRST, address
                         LIMIT $3 FOR UPDATE SKIP LOCKED)
      RETURNING address, base_url`,
    [now, at(CLAIM_LEASE_SECONDS), ctx.sweepSize],
  );
  const results: SellerLivenessStatus[] = [];
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < claimed.length; i = next++) {
      const { address, base_url } = claimed[i]!;
      const status = await check(ctx, address, base_url);
      if (status !== undefined) results.push(status);
    }
  };
  await Promise.all(Array.from({ length: Math.min(ctx.concurrency, claimed.length) }, worker));
  return results;
}

/**
 * Claims a check caused by a report: the seller's row, with its `baseUrl` when this report may check
 * it now (not `busy`, and not checked within `reportInterval`).
 */
async function claimReportCheck(
  ctx: LivenessContext,
  key: string,
  busy: boolean,
): Promise<{ row: LivenessRow; baseUrl: string | undefined }> {
  const { at, clock } = ctx;
  return ctx.store.transaction(async (tx) => {
    const row = await queryOneParsed(
      tx,
      LivenessRowSchema,
      `SELECT ${LIVENESS_COLUMNS} FROM market_sellers WHERE address = $1 FOR UPDATE`,
      [key],
    );
    if (row === undefined || row.removed_at !== null || row.base_url === null) {
      throw new TollgateError("NotFound", "no seller registered at that address");
    }
    if (
      busy ||
      (row.checked_at !== null && clock.now() - row.checked_at.getTime() < ctx.reportInterval * 1000)
    ) {
      return { row, baseUrl: undefined };
    }
    await tx.query("UPDATE market_sellers SET checked_at = $2, next_check_at = $3 WHERE address = $1", [
      key,
      at(0),
      at(CLAIM_LEASE_SECONDS),
    ]);
    return { row, baseUrl: row.base_url };
  });
}

/**
 * Liveness over a migrated store (migration 0073), reading documents with `fetchDocument` (which
 * applies the market's target checks).
 *
 * @example
 * const liveness = createSellerLiveness({ store, clock, fetchDocument });
 * await liveness.sweep(); // from a timer: see startLivenessSweeps
 */
export function createSellerLiveness(
  options: SellerLivenessOptions & { store: Store; clock: Clock; fetchDocument: SellerDocumentFetcher },
): SellerLiveness {
  const ctx = livenessContext(options);
  /** Report checks in flight in this process. */
  const reports = { running: 0 };

  async function report(address: Address): Promise<SellerLivenessStatus & { checked: boolean }> {
    const key = address.toLowerCase();
    const claim = await claimReportCheck(ctx, key, reports.running >= ctx.reportConcurrency);
    if (claim.baseUrl === undefined) return { ...livenessStatusOf(claim.row), checked: false };
    reports.running++;
    try {
      const status = await check(ctx, key, claim.baseUrl);
      return { ...(status ?? livenessStatusOf(claim.row)), checked: status !== undefined };
    } finally {
      reports.running--;
    }
  }

  return { sweep: () => sweep(ctx), report };
}

/**
 * Runs `liveness.sweep()` every `everyMs` until stopped; a failed sweep is logged and retried on the
 * next round. `stop()` waits for a sweep in progress.
 */
export function startLivenessSweeps(
  liveness: SellerLiveness,
  options: {
    everyMs: number;
    logger: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
  },
): { stop(): Promise<void> } {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> | undefined;
  const round = async () => {
    try {
      for (const status of await liveness.sweep()) {
        if (!status.reachable || status.failures > 0) {
          options.logger.info(
            {
              seller: status.address,
              reachable: status.reachable,
              failures: status.failures,
              error: status.lastError,
            },
            "seller check failed",
          );
        }
      }
    } catch (err) {
      options.logger.warn({ err }, "seller liveness sweep failed");
    }
  };
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = round().finally(() => {
        running = undefined;
        schedule();
      });
    }, options.everyMs);
    timer.unref?.();
  };
  // The first round runs at once: sellers registered while the market was down are checked now.
  running = round().finally(() => {
    running = undefined;
    schedule();
  });
  return {
    async stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      await running;
    },
  };
}
