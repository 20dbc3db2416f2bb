/**
 * The default voucher store of a single gate instance: the tallies in memory, every change appended to
 * a journal file with one `write(2)` before `charge` resolves — so before the gate answers.
 *
 * Durability: a written line is in the kernel's page cache the moment `write(2)` returns, so it survives
 * the gate process being killed (SIGKILL, OOM, a crash) at any later instant; `fsync: true` also makes
 * it survive the machine losing power, at the cost of one disk flush per paid request.
 *
 * Format: the store's tag first, `T <tag>` (made when the journal is created; a journal without one gets
 * one when opened), then one line per change, `C <channelId> <highest> <spent> <forwarded> <floor> <signature>[ S]`,
 * the channel's whole record, so the last line of a channel is its state (`-` for a channel sealed
 * before any voucher; ` S` once sealed for a cooperative close). Opening replays the file, keeps
 * each channel's last record, ignores a torn last line, and rewrites the file compacted (temp file,
 * fsync, rename) before appending to it. One process at a time: the journal is locked (`<path>.lock`).
 */
import {
  closeSync,
  existsSync,
  fdatasyncSync,
  fsyncSync,
  openSync,
  readFileSync,
  renameSync,
  writeSync,
} from "node:fs";
import { dirname } from "node:path";
import type { Hex } from "viem";
import { base64UrlDecode, base64UrlEncode } from "../../../protocol/base64.ts";
import { lockDataDir } from "../../../store/lockDataDir.ts";
import { ensurePrivateDir, openPrivateAppend } from "../../../store/privateFiles.ts";
import { type ChannelRecord, createTallyMap, newChannelTag, type VoucherStore } from "./voucherStore.ts";

export type JournalVoucherStoreOptions = {
  /** The journal file (created 0600; its directory 0700). */
  path: string;
  /** `fdatasync` after every write: survives power loss, not only a dead process (default false). */
  fsync?: boolean | undefined;
};

const LINE =
  /^C (0x[0-9a-f]{64}) (0|[1-9][0-9]*) (0|[1-9][0-9]*) (0|[1-9][0-9]*) (0|[1-9][0-9]*) ([A-Za-z0-9_-]{86}|-)( S)?$/;

const TAG_LINE = /^T (0x[0-9a-f]{16})$/m;

/** The tag a journal's text names, if any. */
export function journalTag(text: string): Hex | undefined {
  return TAG_LINE.exec(text)?.[1] as Hex | undefined;
}

function formatRecord(channelId: string, r: ChannelRecord): string {
  const signature = r.signature.length === 0 ? "-" : base64UrlEncode(r.signature);
  return `C ${channelId} ${r.highest} ${r.spent} ${r.forwarded} ${r.floor} ${signature}${r.sealed === true ? " S" : ""}\n`;
}

/** Replays a journal's text: each channel's last well-formed record. Malformed lines are skipped. */
export function replayJournal(text: string): Map<string, ChannelRecord> {
  const records = new Map<string, ChannelRecord>();
  for (const line of text.split("\n")) {
    const m = LINE.exec(line);
    if (m === null) continue;
    records.set(m[1]!, {
      highest: BigInt(m[2]!),
      spent: BigInt(m[3]!),
      forwarded: BigInt(m[4]!),
      floor: BigInt(m[5]!),
      signature: m[6] === "-" ? new Uint8Array(0) : base64UrlDecode(m[6]!),
      sealed: m[7] !== undefined,
    });
  }
  return records;
}

/** A journal opened for appending, with the tallies and tag recovered from it. */
type OpenedJournal = { fd: number; map: ReturnType<typeof createTallyMap>; tag: Hex };

/**
 * Replays the journal at `path`, rewrites it compacted (the tag and the recovered records alone, written
 * whole and fsynced before the old journal is replaced) and opens it for appending.
 */
function openJournal(path: string): OpenedJournal {
  const old = existsSync(path) ? readFileSync(path, "utf8") : "";
  const records = replayJournal(old);
  const map = createTallyMap(records);
  const tag = journalTag(old) ?? newChannelTag();
  const tmp = `${path}.tmp`;
  const tmpFd = openSync(tmp, "w", 0o600);
  try {
    let text = `T ${tag}\n`;
    for (const [id, record] of records) text += formatRecord(id, record);
    writeSync(tmpFd, text);
    fsyncSync(tmpFd);
  } finally {
    closeSync(tmpFd);
  }
  renameSync(tmp, path);
  const dirFd = openSync(dirname(path), "r");
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
  return { fd: openPrivateAppend(path), map, tag };
}

/**
 * Opens (or creates) a journal and recovers every channel's tally from it.
 * @example
 * const store = await createJournalVoucherStore({ path: ".tollgate/channel-vouchers.journal" });
 */
export async function createJournalVoucherStore(options: JournalVoucherStoreOptions): Promise<VoucherStore> {
  ensurePrivateDir(dirname(options.path));
  const unlock = await lockDataDir(options.path);
  let opened: OpenedJournal;
  try {
    opened = openJournal(options.path);
  } catch (error) {
    unlock();
    throw error;
  }
  const { fd, map, tag } = opened;
  let open = true;

  const append = (channelId: string, record: ChannelRecord) => {
    if (!open) throw new Error("voucher journal is closed");
    // One write(2) of one line: in the page cache when it returns, so a killed process keeps it.
    writeSync(fd, formatRecord(channelId, record));
    if (options.fsync === true) fdatasyncSync(fd);
  };

  return {
    async charge(input) {
      const { charged, tally, record, sealed } = map.charge(input);
      if (record !== undefined) {
        try {
          append(input.channelId, record);
        } catch (error) {
          // Not durable: undo in memory so the request is refused (5xx) rather than served unrecorded.
          map.refund(input.channelId, input.price);
          throw error;
        }
      }
      return { charged, tally, sealed };
    },
    async refund(channelId, price) {
      const record = map.refund(channelId, price);
      if (record !== undefined) append(channelId, record);
    },
    async tally(channelId) {
      const record = map.records.get(channelId);
      return record === undefined ? undefined : { highest: record.highest, spent: record.spent };
    },
    async unforwarded(limit) {
      return map.unforwarded(limit);
    },
    async markForwarded(channelId: Hex, cumulativeAmount) {
      const record = map.markForwarded(channelId, cumulativeAmount);
      if (record !== undefined) append(channelId, record);
    },
    async seal(channelId, floor) {
      const { record, changed } = map.seal(channelId, floor);
      // Durable before it resolves: a restarted gate still charges the channel no more.
      if (changed) append(channelId, record);
      return { highest: record.highest, spent: record.spent };
    },
    async tag() {
      return tag;
    },
    async close() {
      if (!open) return;
      open = false;
      closeSync(fd);
      unlock();
    },
  };
}
