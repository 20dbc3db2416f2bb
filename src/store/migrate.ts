import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import { z } from "zod";
import { ErrorCode, TollgateError } from "../protocol/errors.ts";
import { queryParsed } from "./queryParsed.ts";
import type { Store } from "./store.ts";

/** The directory of Tollgate's own migrations: `src/store/migrations/NNNN_name.sql`. */
export const migrationsDir: string = fileURLToPath(new URL("./migrations/", import.meta.url));

const FILE_NAME = /^(\d{4})_([a-z0-9_]+)\.sql$/;

export const MigrationSchema = z.object({
  version: z.number().int().positive(),
  name: z.string(),
  sql: z.string(),
  /** sha256 of the file, recorded when applied so a later edit of an applied file can be noticed. */
  checksum: z.string(),
});
export type Migration = z.infer<typeof MigrationSchema>;

const AppliedRowSchema = z.object({ version: z.number().int(), checksum: z.string() });

/** Reads `NNNN_name.sql` files from `dir`, ordered by version. Other `.sql` names and duplicates throw. */
export async function loadMigrations(dir: string = migrationsDir): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((file) => file.endsWith(".sql")).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = FILE_NAME.exec(file);
    if (match === null) {
      throw new TollgateError(ErrorCode.Internal, `migration file name must be NNNN_name.sql: ${file}`);
    }
    const version = Number(match[1]);
    if (migrations.some((m) => m.version === version)) {
      throw new TollgateError(ErrorCode.Internal, `two migrations share version ${match[1]}: rename one`, {
        details: { file },
      });
    }
    const sql = await readFile(join(dir, file), "utf8");
    const checksum = createHash("sha256").update(sql).digest("hex");
    migrations.push({ version, name: match[2]!, sql, checksum });
  }
  return migrations;
}

/**
 * Applies every migration not yet recorded in `tollgate_migrations`, lowest version first, each in its
 * own transaction together with its record, so each is applied exactly once and a failure leaves the
 * earlier ones in place. A transaction-scoped advisory lock, taken first in every one of those
 * transactions, makes processes that start together on one PostgreSQL database take turns: the
 * second sees the first's records and applies nothing. Returns the versions applied by this call.
 */
export async function migrate(
  store: Store,
  options: { migrations?: readonly Migration[]; logger?: Logger | undefined } = {},
): Promise<number[]> {
  const migrations = [...(options.migrations ?? (await loadMigrations()))].sort(
    (a, b) => a.version - b.version,
  );
  const lockKey = advisoryLockKey(`tollgate_migrations:${store.schema ?? "public"}`);
  const applied: number[] = [];
  let checked = false;
  for (;;) {
    const next = await store.transaction(async (tx) => {
      await tx.query("SELECT pg_advisory_xact_lock($1::bigint)", [lockKey]);
      await tx.exec(`CREATE TABLE IF NOT EXISTS tollgate_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        checksum text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
      const rows = await queryParsed(
        tx,
        AppliedRowSchema,
        "SELECT version, checksum FROM tollgate_migrations",
      );
      const done = new Map(rows.map((row) => [row.version, row.checksum]));
      if (!checked) {
        checked = true;
        for (const m of migrations) {
          const recorded = done.get(m.version);
          if (recorded !== undefined && recorded !== m.checksum) {
            // Never edit an applied migration; add a new one. Warn rather than refuse to start.
            options.logger?.warn(
              { version: m.version, migration: m.name },
              "applied migration file has changed",
            );
          }
        }
      }
      const pending = migrations.find((m) => !done.has(m.version));
      if (pending === undefined) return undefined;
      await tx.exec(pending.sql);
      await tx.query("INSERT INTO tollgate_migrations (version, name, checksum) VALUES ($1, $2, $3)", [
        pending.version,
        pending.name,
        pending.checksum,
      ]);
      return pending;
    });
    if (next === undefined) return applied;
    applied.push(next.version);
    // Not `name`: that key is the logger's own, and pino would write it twice in one line.
    options.logger?.info({ version: next.version, migration: next.name }, "applied migration");
  }
}

/** A stable signed 64-bit key for `pg_advisory_xact_lock`, as a decimal string. */
function advisoryLockKey(name: string): string {
  return createHash("sha256").update(name).digest().readBigInt64BE(0).toString();
}
