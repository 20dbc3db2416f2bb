/**
 * One Redis usage ledger as its parts see it: the client's script runner, the ledger's keys (all with
 * the hash tag `{name}`), and the cycle snapshot and compare-and-set commit every change goes through
 * (createRedisUsageLedger.ts describes the scheme).
 */
import { createHash } from "node:crypto";
import type { Clock } from "../../../../protocol/clock.ts";
import { TollgateError } from "../../../../protocol/errors.ts";
import { COMMIT_LUA, SNAPSHOT_LUA } from "./redisUsageScripts.ts";
import type { SharedCycle } from "./usageLeases.ts";
import type { UsageRequest } from "./usageLedger.ts";

/** The Redis commands the ledger needs; a connected client of the `redis` package satisfies it. */
export type RedisUsageClient = {
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
};

export const MAX_UNSETTLED = 2n ** 62n;
/** Compare-and-set attempts before a change is reported as a fault. */
export const MAX_CAS_ATTEMPTS = 200;

/** One ledger: how to run a script, its keys, its id and the clock. */
export type RedisLedger = {
  /** Runs a script by its SHA-1, loading it when Redis does not know it yet. */
  run(script: string, keys: string[], args: string[]): Promise<unknown>;
  /** The prefix of every key of this ledger (ends with `{name}:`). */
  p: string;
  ledgerKey: string;
  pendingKey: string;
  leasesKey: string;
  claimedKey: string;
  sentKey: string;
  cycleKey(id: bigint | string): string;
  ledgerId: string;
  clock: Clock;
};

/** The script runner over `client`: `EVALSHA`, then `EVAL` on `NOSCRIPT`. */
export function scriptRunner(client: RedisUsageClient): RedisLedger["run"] {
  return async (script, keys, args) => {
    try {
      return await client.evalSha(sha1(script), { keys, arguments: args });
    } catch (error) {
      if (!String((error as Error)?.message ?? "").includes("NOSCRIPT")) throw error;
      return await client.eval(script, { keys, arguments: args });
    }
  };
}

/** The keys of the ledger `name` under `prefix`. */
export function ledgerKeys(prefix: string, name: string) {
  const p = `${prefix}{${name}}:`;
  return {
    p,
    ledgerKey: `${p}L`,
    pendingKey: `${p}pend`,
    leasesKey: `${p}leases`,
    claimedKey: `${p}claimed`,
    sentKey: `${p}sent`,
    cycleKey: (id: bigint | string) => `${p}c:${id}`,
  };
}

const sha1 = (script: string) => createHash("sha1").update(script).digest("hex");
export const text = (value: unknown): string => (typeof value === "string" ? value : String(value ?? ""));

/** A cycle snapshot as read: the rule's input and the version to compare. */
export type Snapshot = { cycle: SharedCycle | undefined; version: string; unsettled: string };

export function snapshotOf(fields: unknown[], unsettled: unknown): Snapshot {
  const [ps, pe, units, overage, pending, leased, epoch, v] = fields.map((f) =>
    f === null || f === undefined ? undefined : text(f),
  );
  const version = v ?? "";
  const u = text(unsettled) || "0";
  if (ps === undefined || pe === undefined) return { cycle: undefined, version, unsettled: u };
  return {
    version,
    unsettled: u,
    cycle: {
      periodStart: Number(ps),
      periodEnd: Number(pe),
      units: BigInt(units ?? "0"),
      overage: BigInt(overage ?? "0"),
      pending: BigInt(pending ?? "0"),
      leased: BigInt(leased ?? "0"),
      epoch: Number(epoch ?? "1"),
    },
  };
}

export const cycleArgs = (c: SharedCycle) => [
  String(c.periodStart),
  String(c.periodEnd),
  c.units.toString(),
  c.overage.toString(),
  c.pending.toString(),
  c.leased.toString(),
  String(c.epoch),
];

/**
 * Opens the ledger `name` in Redis.
 *
 * @example

/** A subscription's cycle and the ledger's unsettled figure, read together. */
export async function snapshot(ledger: RedisLedger, subscriptionId: bigint): Promise<Snapshot> {
  const [fields, unsettled] = (await ledger.run(
    SNAPSHOT_LUA,
    [ledger.cycleKey(subscriptionId), ledger.ledgerKey],
    [],
  )) as [unknown[], unknown];
  return snapshotOf(fields, unsettled);
}

/** `request` with its exposure bound kept where `HINCRBY` stays exact. */
export const bounded = (request: UsageRequest): UsageRequest =>
  request.maxUnsettled > MAX_UNSETTLED ? { ...request, maxUnsettled: MAX_UNSETTLED } : request;

/** A lease to create with a commit. */
export type NewRedisLease = {
  ttlMs: number;
  units: bigint;
  spent: bigint;
  base: bigint;
  inc: bigint;
  price: bigint;
  worst: bigint;
};

/**
 * Writes `cycle` and `unsettled` if neither the cycle's version nor the ledger's unsettled figure moved
 * since `seen` (and creates `lease`, if given): false when they moved, the new lease's id, or true.
 */
export async function commit(
  ledger: RedisLedger,
  subscriptionId: bigint,
  seen: Snapshot,
  cycle: SharedCycle,
  unsettled: bigint,
  lease?: NewRedisLease,
): Promise<string | boolean> {
  const args = [
    seen.version,
    seen.unsettled,
    subscriptionId.toString(),
    ...cycleArgs(cycle),
    unsettled.toString(),
  ];
  if (lease !== undefined) {
    args.push(
      String(Math.ceil(lease.ttlMs)),
      lease.units.toString(),
      lease.spent.toString(),
      lease.base.toString(),
      lease.inc.toString(),
      lease.price.toString(),
      lease.worst.toString(),
    );
  }
  const reply = (await ledger.run(
    COMMIT_LUA,
    [ledger.cycleKey(subscriptionId), ledger.ledgerKey, ledger.pendingKey, `${ledger.p}l:`, ledger.leasesKey],
    args,
  )) as unknown[];
  if (Number(reply[0]) !== 1) return false;
  return reply[1] === undefined ? true : text(reply[1]);
}

export const contended = () =>
  new TollgateError("Internal", "the Redis usage ledger stayed contended; the use was not counted");
