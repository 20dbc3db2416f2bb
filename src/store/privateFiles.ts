/**
 * Tollgate's files on disk are its owner's only (docs/operations-storage.md, "Files on disk and their permissions"): directories 0700, files 0600.
 * They hold payments, budgets, webhook secrets (sealed), keys and the devnet's accounts; on a shared
 * machine another user must not read them.
 *
 * Why chmod and not umask: PGlite (emscripten's NODEFS) sets each file's mode itself (0666) whatever
 * the process umask, and a library must not change the umask of the process it runs in. So:
 * - a directory Tollgate owns is created 0700 and tightened when opened, which alone keeps other users
 *   out of everything below it, including files PGlite creates while it runs (WAL segments);
 * - the files in it are tightened to 0600 when a store opens, once PGlite has created its files, and
 *   when it closes;
 * - files Tollgate writes itself are created 0600 (and chmodded, in case they existed).
 *
 * Only paths Tollgate owns are changed: a directory that belongs to another user or has the sticky bit
 * (/tmp and the like) is never chmodded, and symbolic links are not followed.
 */
import {
  chmodSync,
  closeSync,
  fchmodSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";

const DIR_MODE = 0o700;
const FILE_MODE = 0o600;
const STICKY = 0o1000;

/** Creates `dir` (and missing parents) 0700, or tightens it to 0700 if it exists and is ours. */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: DIR_MODE });
  tightenDir(dir);
}

/**
 * Tightens `dir` and everything below it: directories to 0700, files to 0600. Entries that vanish
 * meanwhile (a WAL segment recycled) are skipped. Returns how many modes were changed.
 */
export function tightenTree(dir: string): number {
  let changed = tightenDir(dir) ? 1 : 0;
  let entries: import("node:fs").Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return changed;
    throw error;
  }
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) changed += tightenTree(path);
    else if (entry.isFile() && tightenPrivateFile(path)) changed++;
  }
  return changed;
}

/** Writes `data` to `path` readable by its owner only (0600, also when the file existed). */
export function writePrivateFile(path: string, data: string | Uint8Array): void {
  const fd = openSync(path, "w", FILE_MODE);
  try {
    fchmodSync(fd, FILE_MODE);
    writeFileSync(fd, data);
  } finally {
    closeSync(fd);
  }
}

/** Opens `path` for appending (a log file), 0600; the caller closes the descriptor. */
export function openPrivateAppend(path: string): number {
  const fd = openSync(path, "a", FILE_MODE);
  fchmodSync(fd, FILE_MODE);
  return fd;
}

/** Sets a directory we own to 0700 (never a shared one); true when it changed. */
function tightenDir(dir: string): boolean {
  const stat = lstatSync(dir);
  if (!stat.isDirectory() || !ownedByUs(stat.uid) || (stat.mode & STICKY) !== 0) return false;
  if ((stat.mode & 0o777) === DIR_MODE) return false;
  chmodSync(dir, DIR_MODE);
  return true;
}

/** Sets a file we own to 0600 if group or others have any access; true when it changed. */
export function tightenPrivateFile(path: string): boolean {
  try {
    const stat = lstatSync(path);
    if (!stat.isFile() || !ownedByUs(stat.uid) || (stat.mode & 0o077) === 0) return false;
    chmodSync(path, FILE_MODE);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw error;
  }
}

function ownedByUs(uid: number): boolean {
  return typeof process.getuid !== "function" || process.getuid() === uid;
}
