import type { PGlite } from "@electric-sql/pglite";
import type { Logger } from "pino";

/** When an embedded store vacuums and analyses its tables. */
export type PgliteMaintenanceOptions = {
  /** How often the store looks whether a pass is due, in ms (default 30 000). */
  intervalMs?: number | undefined;
  /**
   * A pass waits for a quiet look (at most one statement a second since the look before); a store
   * that is never quiet gets its pass after this many ms anyway (default 300 000).
   */
  maxDeferMs?: number | undefined;
};

/** What one maintenance pass did. */
export type MaintenancePass = {
  /** Tables vacuumed (their names as PostgreSQL prints them). */
  readonly vacuumed: readonly string[];
  /** Tables analysed. */
  readonly analysed: readonly string[];
  /** Whether the whole database was vacuumed to keep transaction ids from wrapping around. */
  readonly wholeDatabase: boolean;
  readonly ms: number;
};

export type PgliteMaintenance = {
  /** Runs a pass now (after the one in progress, if any). */
  runNow(): Promise<MaintenancePass>;
  /** Stops looking and waits for a pass in progress. */
  stop(): Promise<void>;
};

const DEFAULT_INTERVAL_MS = 30_000;
const DEFAULT_MAX_DEFER_MS = 300_000;
/** A pass this long (ms) is logged at info rather than debug. */
const SLOW_PASS_MS = 250;

// PostgreSQL's autovacuum thresholds (its defaults): a table is vacuumed once its dead row versions
// exceed 50 + 20 % of its live rows, or its inserts since the last vacuum 1 000 + 20 % (which sets
// pages all-visible and freezes old rows); analysed once its changed rows exceed 50 + 10 %.
const VACUUM_BASE = 50;
const VACUUM_SCALE = 0.2;
const INSERT_BASE = 1_000;
const INSERT_SCALE = 0.2;
const ANALYZE_BASE = 50;
const ANALYZE_SCALE = 0.1;
/**
 * Transaction ids a table's or the database's oldest unfrozen row may be behind before it is vacuumed
 * whatever its counts: PostgreSQL's `vacuum_freeze_table_age`, at which a vacuum freezes every page.
 * PostgreSQL stops taking writes at ~2 000 million; a store that writes ten transactions per payment
 * reaches this age after 15 million payments.
 */
const FREEZE_AGE = 150_000_000;

const TABLES = `SELECT s.relid::regclass::text AS name, s.n_live_tup::float8 AS live,
  s.n_dead_tup::float8 AS dead, s.n_mod_since_analyze::float8 AS changed,
  s.n_ins_since_vacuum::float8 AS inserted, age(c.relfrozenxid)::float8 AS xid_age
  FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid ORDER BY 1`;
const DATABASE_AGE =
  "SELECT age(datfrozenxid)::float8 AS xid_age FROM pg_database WHERE datname = current_database()";

type TableStats = {
  name: string;
  live: number;
  dead: number;
  changed: number;
  inserted: number;
  xid_age: number;
};

/**
 * Vacuums and analyses an embedded PGlite database, which has no autovacuum of its own (the setting
 * reads `on`, but PGlite runs no launcher). Without it every updated row leaves its old version in the
 * table and its indexes for good (a payment row is updated at least twice), the planner has no
 * statistics, and transaction ids would one day wrap around.
 *
 * Every `intervalMs` it looks at how many statements the store ran (`activity`). It runs a pass when
 * some ran since the last pass and at most one a second since the look before (the store is quiet),
 * or when the last pass is `maxDeferMs` old. A pass reads PGlite's table statistics and vacuums or analyses only the
 * tables past PostgreSQL's own autovacuum thresholds, one statement each. PGlite runs one statement
 * at a time, so a pass holds the store for as long as its statements take (a `VACUUM` of a table
 * with 200 000 payments after 20 000 payments' updates ~120 ms, an `ANALYZE` of it ~650 ms; taken
 * rarely and at quiet moments). The statements go straight to PGlite: the store's prepared
 * statements stay (PostgreSQL replans them itself once new statistics arrive).
 */
export function startPgliteMaintenance(options: {
  db: PGlite;
  /** A number that grows with every statement the store runs. */
  activity: () => number;
  /** `false`: passes only through `runNow`. */
  settings?: PgliteMaintenanceOptions | false | undefined;
  logger?: Logger | undefined;
}): PgliteMaintenance {
  const { db, activity, logger } = options;
  const settings = options.settings === false ? undefined : options.settings;
  const intervalMs = settings?.intervalMs ?? DEFAULT_INTERVAL_MS;
  const maxDeferMs = settings?.maxDeferMs ?? DEFAULT_MAX_DEFER_MS;
  // Quiet: at most one statement a second since the look before (an idle facilitator's backstop
  // reads, say), none when looks come faster than that.
  const quietStatements = Math.floor(intervalMs / 1_000);
  let lastLook = activity();
  let atLastPass = lastLook;
  let lastPassAt = Date.now();
  /** The pass in progress (or queued), settled without a rejection. */
  let running: Promise<void> | undefined;
  let stopped = false;

  const pass = async (): Promise<MaintenancePass> => {
    const started = performance.now();
    atLastPass = activity();
    // PGlite keeps its counters in the backend until told to flush them; the flush happens as the
    // statement that asks for it ends.
    await db.query("SELECT pg_stat_force_next_flush()");
    const tables = (await db.query<TableStats>(TABLES)).rows;
    const { vacuumed, analysed } = await maintainTables(db, tables, () => stopped);
    // The system catalogs age too, and only a database-wide vacuum advances the database's horizon.
    const wholeDatabase = !stopped && !db.closed && (await vacuumAgedDatabase(db));
    lastPassAt = Date.now();
    const result = { vacuumed, analysed, wholeDatabase, ms: performance.now() - started };
    logPass(logger, result);
    return result;
  };

  const runNow = (): Promise<MaintenancePass> => {
    const next = (running ?? Promise.resolve()).then(pass);
    const tracked = next.then(
      () => {},
      () => {},
    );
    running = tracked;
    void tracked.then(() => {
      if (running === tracked) running = undefined;
    });
    return next;
  };

  const look = () => {
    const seen = activity();
    const quiet = seen - lastLook <= quietStatements;
    lastLook = seen;
    if (running !== undefined || db.closed || seen === atLastPass) return;
    if (!quiet && Date.now() - lastPassAt < maxDeferMs) return;
    runNow().catch((error: unknown) => {
      if (!db.closed) logger?.warn({ err: error }, "embedded store maintenance failed");
    });
  };
  const timer = options.settings === false ? undefined : setInterval(look, intervalMs);
  timer?.unref();

  return {
    runNow,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}

/** Vacuums or analyses each table past PostgreSQL's thresholds, one statement each, until stopped. */
async function maintainTables(
  db: PGlite,
  tables: readonly TableStats[],
  stopped: () => boolean,
): Promise<{ vacuumed: string[]; analysed: string[] }> {
  const vacuumed: string[] = [];
  const analysed: string[] = [];
  for (const table of tables) {
    if (stopped() || db.closed) break;
    const vacuum =
      table.dead > VACUUM_BASE + VACUUM_SCALE * table.live ||
      table.inserted > INSERT_BASE + INSERT_SCALE * table.live ||
      table.xid_age > FREEZE_AGE;
    const analyse = table.changed > ANALYZE_BASE + ANALYZE_SCALE * table.live;
    if (!vacuum && !analyse) continue;
    const verb = vacuum && analyse ? "VACUUM (ANALYZE)" : vacuum ? "VACUUM" : "ANALYZE";
    await db.exec(`${verb} ${table.name}`);
    if (vacuum) vacuumed.push(table.name);
    if (analyse) analysed.push(table.name);
  }
  return { vacuumed, analysed };
}

/** Vacuums the whole database when its oldest unfrozen transaction id is past FREEZE_AGE; whether it did. */
async function vacuumAgedDatabase(db: PGlite): Promise<boolean> {
  const [database] = (await db.query<{ xid_age: number }>(DATABASE_AGE)).rows;
  if (database === undefined || database.xid_age <= FREEZE_AGE) return false;
  await db.exec("VACUUM");
  return true;
}

function logPass(logger: Logger | undefined, result: MaintenancePass): void {
  // A long pass held every other statement back: worth an operator's eye next to a latency spike.
  if (result.ms >= SLOW_PASS_MS) logger?.info(result, "embedded store maintained (slow pass)");
  else if (result.vacuumed.length > 0 || result.analysed.length > 0 || result.wholeDatabase)
    logger?.debug(result, "embedded store maintained");
}
