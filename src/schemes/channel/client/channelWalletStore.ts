/**
 * Where a payer keeps its channels: terms, session key and how far it has signed. A payer that
 * restarts with the same store continues its channels and never signs a lower cumulative amount than
 * before (a gate would refuse it as stale; a higher one than needed would overpay).
 *
 * `createFileChannelWalletStore` is a journal: a channel's whole record as a JSON line when it changes
 * (opened, topped up, closing), and a short `P <channelId> <signed> <owed>` line per voucher, written
 * with one `write(2)` before the voucher leaves the process, so a killed payer keeps it. Opening replays
 * and compacts it; the file is 0600 (it holds session keys). One process at a time (`<path>.lock`).
 */
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { z } from "zod";
import { AddressSchema, Hex8Schema, Hex32Schema } from "../../../protocol/address.ts";
import { AtomicBigIntSchema } from "../../../protocol/amount.ts";
import { NetworkSchema } from "../../../protocol/network.ts";
import { HttpUrlSchema } from "../../../protocol/paymentRequired.ts";
import { lockDataDir } from "../../../store/lockDataDir.ts";
import { ensurePrivateDir, openPrivateAppend } from "../../../store/privateFiles.ts";

/** A payer's channel as stored. */
export const ChannelRecordSchema = z.object({
  channelId: Hex32Schema,
  network: NetworkSchema,
  contract: AddressSchema,
  facilitator: HttpUrlSchema,
  payer: AddressSchema,
  payee: AddressSchema,
  token: AddressSchema,
  deposit: AtomicBigIntSchema,
  /** The highest cumulative amount signed so far (never signed lower again). */
  signed: AtomicBigIntSchema,
  /** What the payer's requests were charged as far as it knows (refunds of failed requests taken off). */
  owed: AtomicBigIntSchema,
  closeDelay: z.int().nonnegative(),
  salt: Hex32Schema,
  /**
   * The gate's tag the channel was opened for (the salt's first 8 bytes): its vouchers are paid to gates
   * offering this tag only. Absent for channels opened for gates without one.
   */
  tag: Hex8Schema.optional(),
  /** The P-256 session key, PKCS#8 DER in base64url. */
  sessionKey: z.string().min(1).max(1024),
  /** `opening`: signed, not yet confirmed open; `closing`: close asked; `closed`: settled on chain. */
  status: z.enum(["opening", "open", "closing", "closed"]),
  /** Unix seconds the open authorization stops being valid (an `opening` record past it never opened). */
  openValidBefore: z.int().nonnegative(),
  /**
   * A route of the seller's gate sold on this channel's terms: where the payer asks for a cooperative
   * close (`X-Tollgate-Channel-Close`). Absent for channels opened before routes were remembered.
   */
  closeRoute: z.object({ method: z.string().min(1).max(16), url: HttpUrlSchema }).optional(),
});
export type ChannelRecord = z.infer<typeof ChannelRecordSchema>;
export type ChannelRecordInput = z.input<typeof ChannelRecordSchema>;

export type ChannelWalletStore = {
  /** Every channel, as last written. */
  load(): ChannelRecord[];
  /** Writes a channel's whole record (durable when it returns). */
  put(record: ChannelRecord): void;
  /** Writes a channel's signed and owed amounts (durable when it returns). */
  progress(channelId: string, signed: bigint, owed: bigint): void;
  close(): Promise<void>;
};

/** Channels in memory only: a restarted payer opens new channels (and closes the old by the wallet). */
export function createMemoryChannelWalletStore(): ChannelWalletStore {
  const records = new Map<string, ChannelRecord>();
  return {
    load: () => [...records.values()],
    put: (record) => void records.set(record.channelId, { ...record }),
    progress(channelId, signed, owed) {
      const r = records.get(channelId);
      if (r !== undefined) records.set(channelId, { ...r, signed, owed });
    },
    async close() {},
  };
}

const toJson = (r: ChannelRecord) =>
  JSON.stringify({
    ...r,
    deposit: r.deposit.toString(),
    signed: r.signed.toString(),
    owed: r.owed.toString(),
  });
const PROGRESS = /^P (0x[0-9a-f]{64}) (0|[1-9][0-9]*) (0|[1-9][0-9]*)$/;

/** Replays a wallet journal: each channel's last record with its last progress. Bad lines are skipped. */
export function replayWalletJournal(text: string): Map<string, ChannelRecord> {
  const records = new Map<string, ChannelRecord>();
  for (const line of text.split("\n")) {
    if (line.startsWith("P ")) {
      const m = PROGRESS.exec(line);
      const r = m === null ? undefined : records.get(m[1]!);
      if (m === null || r === undefined) continue;
      const signed = BigInt(m[2]!);
      // Never go back: a replayed older line cannot lower what was signed.
      records.set(r.channelId, { ...r, signed: signed > r.signed ? signed : r.signed, owed: BigInt(m[3]!) });
      continue;
    }
    try {
      const parsed = ChannelRecordSchema.safeParse(JSON.parse(line));
      if (parsed.success) {
        const before = records.get(parsed.data.channelId);
        const r = parsed.data;
        records.set(
          r.channelId,
          before !== undefined && before.signed > r.signed ? { ...r, signed: before.signed } : r,
        );
      }
    } catch {
      // A torn last line: skipped.
    }
  }
  return records;
}

/**
 * @example
 * const store = await createFileChannelWalletStore({ path: ".tollgate/channels.journal" });
 * const payer = createPayer({ account, network, facilitator, channels: { store } });
 */
export async function createFileChannelWalletStore(options: { path: string }): Promise<ChannelWalletStore> {
  ensurePrivateDir(dirname(options.path));
  const unlock = await lockDataDir(options.path);
  let fd: number;
  let records: Map<string, ChannelRecord>;
  try {
    records = existsSync(options.path) ? replayWalletJournal(readFileSync(options.path, "utf8")) : new Map();
    const tmp = `${options.path}.tmp`;
    const tmpFd = openSync(tmp, "w", 0o600);
    try {
      let text = "";
      for (const r of records.values()) text += `${toJson(r)}\n`;
      writeSync(tmpFd, text);
      fsyncSync(tmpFd);
    } finally {
      closeSync(tmpFd);
    }
    renameSync(tmp, options.path);
    fd = openPrivateAppend(options.path);
  } catch (error) {
    unlock();
    throw error;
  }
  return {
    load: () => [...records.values()],
    put(record) {
      writeSync(fd, `${toJson(record)}\n`);
      records.set(record.channelId, { ...record });
    },
    progress(channelId, signed, owed) {
      writeSync(fd, `P ${channelId} ${signed} ${owed}\n`);
      const r = records.get(channelId);
      if (r !== undefined) records.set(channelId, { ...r, signed, owed });
    },
    async close() {
      closeSync(fd);
      unlock();
    },
  };
}
