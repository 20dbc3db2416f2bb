import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { createStore } from "./createStore.ts";
import type { Store } from "./store.ts";

/**
 * A throwaway migrated store for a test: in a fresh schema of the PostgreSQL at `databaseUrl` when one
 * is given (so test files sharing one database do not see each other's rows), otherwise an in-memory
 * PGlite. `close()` drops the schema first. The caller reads the environment, e.g.
 * `createTestStore({ databaseUrl: process.env.DATABASE_URL })`.
 */
export async function createTestStore(
  options: {
    databaseUrl?: string | undefined;
    logger?: Logger | undefined;
    /** Apply the migrations (default true); `false` for tests of the migrations themselves. */
    migrate?: boolean | undefined;
  } = {},
): Promise<Store> {
  if (options.databaseUrl === undefined || options.databaseUrl === "") {
    return createStore({ dataDir: "memory://", logger: options.logger, migrate: options.migrate });
  }
  const store = await createStore({
    databaseUrl: options.databaseUrl,
    schema: `test_${randomBytes(6).toString("hex")}`,
    maxConnections: 4,
    logger: options.logger,
    migrate: options.migrate,
  });
  return {
    ...store,
    async close() {
      try {
        await store.dropSchema();
      } finally {
        await store.close();
      }
    },
  };
}
