/**
 * The agent runtime's store for the `tollgate budget` and `tollgate run` commands: PostgreSQL when
 * `DATABASE_URL` is set, else PGlite in `<dir>/agents`.
 *
 * The PGlite directory opens in one process at a time (the store holds it under a lock file, see
 * src/store/lockDataDir.ts); here a second opener — `budget show` while a `run` is going — waits for
 * the first to finish, up to `waitMs`, before it is refused with `store_in_use`.
 */
import { join } from "node:path";
import { createStore } from "../store/createStore.ts";
import { ensurePrivateDir } from "../store/privateFiles.ts";
import type { Store } from "../store/store.ts";

/** Where the agent runtime keeps its PGlite database under the Tollgate directory. */
export function agentDataDir(dir: string): string {
  // Not the facilitator's or the market's directory: one PGlite directory opens in one process only.
  return join(dir, "agents");
}

export type OpenAgentStoreOptions = {
  /** `DATABASE_URL`: use this PostgreSQL (shared by any number of processes; no lock). */
  databaseUrl: string | undefined;
  /** The Tollgate directory (absolute); the database is in `<dir>/agents`. */
  dir: string;
  /** How long to wait for another holder of the directory to close it (default 30 s). */
  waitMs?: number | undefined;
  /** Waits between attempts to take the lock (default: a timer). */
  sleep?: ((ms: number) => Promise<void>) | undefined;
};

/**
 * Opens the agent runtime's store; `close()` releases the directory.
 * @example
 * const store = await openAgentStore({ databaseUrl: env.DATABASE_URL, dir: resolve(".tollgate") });
 * try { … } finally { await store.close(); }
 */
export async function openAgentStore(options: OpenAgentStoreOptions): Promise<Store> {
  if (options.databaseUrl !== undefined && options.databaseUrl !== "") {
    return createStore({ databaseUrl: options.databaseUrl });
  }
  // The budgets and spends are the operator's business only: the Tollgate directory and the store in
  // it are 0700, its files 0600 (src/store/privateFiles.ts).
  ensurePrivateDir(options.dir);
  return createStore({
    dataDir: agentDataDir(options.dir),
    lock: { waitMs: options.waitMs ?? 30_000, sleep: options.sleep },
  });
}
