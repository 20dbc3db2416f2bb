/**
 * An exclusive lock on a PGlite data directory, held by one process at a time.
 *
 * Why: PGlite does not refuse a second opener of the same directory. Two instances (two processes, or
 * two opens in one process) each write their own WAL over the other's, so one of them silently loses
 * committed rows: a payment record, a budget just set, a spend. With the lock the second opener waits
 * for the first to close and, if it does not in time, gets a clear `store_in_use` error.
 *
 * The lock is `<dataDir>.lock`, created exclusively (`O_EXCL`), holding the owner's pid. A lock whose
 * process is gone (a crash, SIGKILL) is taken over; taking over unlinks and creates exclusively again,
 * so two processes taking over at once cannot both win.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { TollgateError } from "../protocol/errors.ts";

export type LockDataDirOptions = {
  /** How long to wait for another holder to close the directory (default 0: refuse at once). */
  waitMs?: number | undefined;
  /** Waits between attempts (default: a timer). Each call counts `POLL_MS` of waiting. */
  sleep?: ((ms: number) => Promise<void>) | undefined;
};

/** Time between attempts to take a held lock. */
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
    // 0600 like every file of the store (privateFiles.ts).
    const fd = openSync(path, "wx", 0o600);
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
 * Takes the lock on `dataDir`; resolves with a function that releases it (safe to call twice).
 * Throws `InvalidRequest` with `details.reason = "store_in_use"` naming the holder when the lock is
 * still held after `waitMs`.
 */
export async function lockDataDir(dataDir: string, options: LockDataDirOptions = {}): Promise<() => void> {
  const path = `${dataDir}.lock`;
  // Parents created here are private; an existing parent is the operator's and left as it is.
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const waitMs = options.waitMs ?? 0;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  for (let waited = 0; ; waited += POLL_MS) {
    const attempt = tryLock(path);
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
        `the database ${dataDir} is in use by ${who}; an embedded PGlite database opens in one process at a time: stop the other one, or set DATABASE_URL to share a PostgreSQL database`,
        { details: { reason: "store_in_use", dataDir, owner: attempt.owner } },
      );
    }
    await sleep(POLL_MS);
  }
  let released = false;
  return () => {
    if (released) return;
    released = true;
    try {
      unlinkSync(path);
    } catch {
      // Already gone: nothing to release.
    }
  };
}
