import { createPgliteStore } from "./createPgliteStore.ts";
import { createPostgresStore } from "./createPostgresStore.ts";
import { migrate } from "./migrate.ts";
import type { Store, StoreOptions } from "./store.ts";

/** Where the embedded database lives when neither `databaseUrl` nor `dataDir` is given. */
export const defaultDataDir = ".tollgate/pglite";

/**
 * Opens the store: PostgreSQL when `databaseUrl` is given, otherwise embedded PGlite under `dataDir`;
 * then applies pending migrations (unless `migrate: false`).
 * @example
 * const store = await createStore({ databaseUrl: env.DATABASE_URL, logger });
 * const rows = await queryParsed(store, z.object({ n: BigintColumnSchema }), "SELECT count(*) AS n FROM payments");
 * await store.close();
 */
export async function createStore(options: StoreOptions = {}): Promise<Store> {
  const store =
    options.databaseUrl !== undefined && options.databaseUrl !== ""
      ? await createPostgresStore({
          databaseUrl: options.databaseUrl,
          schema: options.schema,
          maxConnections: options.maxConnections,
          preparedStatements: options.preparedStatements,
          logger: options.logger,
        })
      : await createPgliteStore({
          dataDir: options.dataDir ?? defaultDataDir,
          schema: options.schema,
          lock: options.lock,
          maintenance: options.maintenance,
          logger: options.logger,
        });
  if (options.migrate !== false) {
    try {
      await migrate(store, { logger: options.logger });
    } catch (error) {
      await store.close();
      throw error;
    }
  }
  options.logger?.debug({ kind: store.kind, schema: store.schema }, "store ready");
  return store;
}
