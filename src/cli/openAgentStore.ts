/**
 * The agent runtime's store for the `tollgate budget` and `tollgate run` commands: PostgreSQL when
 * `DATABASE_URL` is set, else PGlite in `<dir>/agents`, held under a lock file.
 *
 * Why the lock: a PGlite directory may be open in one place at a time. A second opener — another
 * `tollgate` process (`budget show` while a `run` is going), or a second open in the same process —
 * does not fail: each instance writes its own WAL over the other's, so one of them silently loses
 * committed rows (a budget just set is not found, a spend vanishes from the ledger). With the lock,
 * the second opener waits for the first to close and, if it does not in time, gets a clear error.
 *
 * The lock is `<dir>/agents.lock`, created exclusively, holding the owner's pid. A lock whose process
 * is gone (a crash) is taken over.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { TollgateError } from "../protocol/errors.ts";
import { createStore } from "../store/createStore.ts";
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

const POLL_MS = 100;

/** True when a process with this pid exists (signal 0 checks without sending anything). */
function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The pid in a lock file, or undefined when it cannot be read (being written, or removed). */
function lockOwner(path: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(path, "utf8").trim(), 10);
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Creates the lock file if no live process holds it; returns the holder's pid when one does. */
function tryLock(path: string): { locked: true } | { locked: false; owner: number | undefined } {
  try {
    const fd = openSync(path, "wx");
    try {
      writeSync(fd, `${process.pid}\n`);
    } finally {
      closeSync(fd);
    }
    return { locked: true };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  const owner = lockOwner(path);
  if (owner !== undefined && owner !== process.pid && !processExists(owner)) {
    // Left by a process that is gone: take it over (unlink, then create exclusively again, so two
    // processes taking over at once cannot both win).
    try {
      unlinkSync(path);
    } catch {
      // Someone else removed it first.
    }
    return tryLock(path);
  }
  return { locked: false, owner };
}

/**
 * Opens the agent runtime's store; `close()` releases the directory's lock.
 * @example
 * const store = await openAgentStore({ databaseUrl: env.DATABASE_URL, dir: resolve(".tollgate") });
 * try { … } finally { await store.close(); }
 */
export async function openAgentStore(options: OpenAgentStoreOptions): Promise<Store> {
  if (options.databaseUrl !== undefined && options.databaseUrl !== "") {
    return createStore({ databaseUrl: options.databaseUrl });
  }
  const dataDir = agentDataDir(options.dir);
  const lockPath = `${dataDir}.lock`;
  await mkdir(dirname(lockPath), { recursive: true });
  const waitMs = options.waitMs ?? 30_000;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  for (let waited = 0; ; waited += POLL_MS) {
    const attempt = tryLock(lockPath);
    if (attempt.locked) break;
    if (waited >= waitMs) {
      const who =
        attempt.owner === undefined
          ? "another opener"
          : attempt.owner === process.pid
            ? "this process (it is already open here)"
            : `process ${attempt.owner}`;
      throw new TollgateError(
        "InvalidRequest",
        `the agent store ${dataDir} is in use by ${who}; PGlite opens in one process at a time: wait for it to finish, or set DATABASE_URL to share a PostgreSQL database`,
        { details: { reason: "store_in_use", dataDir, owner: attempt.owner } },
      );
    }
    await sleep(POLL_MS);
  }
  let store: Store;
  try {
    store = await createStore({ dataDir });
  } catch (error) {
    unlinkSync(lockPath);
    throw error;
  }
  let released = false;
  return {
    ...store,
    kind: store.kind,
    schema: store.schema,
    async close() {
      try {
        await store.close();
      } finally {
        if (!released) {
          released = true;
          try {
            unlinkSync(lockPath);
          } catch {
            // Already gone: nothing to release.
          }
        }
      }
    },
  };
}
