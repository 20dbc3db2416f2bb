/**
 * Idempotent relays in `subscription_relays`, keyed by the digest of the signed request: a retry (say,
 * after a timeout) gets the first attempt's result rather than an `InvalidSignature` for the intent
 * nonce the first attempt used. A row is `pending` while its call is prepared, `sent` with its
 * transaction, `done` with its result; a `pending` row older than `STALE_RELAY_MS` was abandoned (a
 * crash) and is redone. The facilitator pays each relay's gas, so one subscriber gets at most
 * `maxRelaysPerHour` of them.
 */
import { type Address, type Hash, type Hex, keccak256, type TransactionReceipt, toBytes } from "viem";
import { z } from "zod";
import { canonicalJson } from "../../../protocol/canonicalJson.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { SafeIntColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed } from "../../../store/queryParsed.ts";
import { toManagerError } from "./managerErrors.ts";
import { read, type ServiceDeps } from "./serviceReads.ts";

/** A relay that has sat `pending` this long without a transaction was abandoned (a crash): redo it. */
const STALE_RELAY_MS = 120_000;
/** Polls (every 250 ms, so 30 s) a duplicate request makes for the first one's result before it is told to retry. */
const DUPLICATE_POLLS = 120;

const RelayRowSchema = z.object({
  status: z.enum(["pending", "sent", "done"]),
  tx_hash: z
    .string()
    .regex(/^0x[0-9a-f]{64}$/)
    .nullable() as z.ZodType<Hash | null>,
  result: z.unknown().nullable(),
  age_ms: SafeIntColumnSchema,
});

export type Prepared<C> = { call: { to: Address; data: Hex }; context: C };

export type RelaySteps<T, C> = {
  prepare(): Promise<Prepared<C>>;
  finish(receipt: TransactionReceipt, context: C | undefined): Promise<T>;
};

/** Relays the call `steps` prepare once per signed request, and answers every retry of it the same. */
export async function relay<T, C>(
  deps: ServiceDeps,
  kind: string,
  subscriber: Address,
  request: unknown,
  steps: RelaySteps<T, C>,
): Promise<T> {
  const { ctx, manager } = deps;
  const digest = keccak256(toBytes(canonicalJson({ kind, chainId: ctx.chainId, manager, request })));
  const earlier = await claimRelay(deps, digest, kind, subscriber, steps);
  if (earlier !== undefined) return earlier.result;
  let sent = false;
  try {
    const prepared = await steps.prepare();
    const hash = await ctx.gas.send(prepared.call);
    sent = true;
    await ctx.store.query(
      "UPDATE subscription_relays SET status = 'sent', tx_hash = $2, updated_at = now() WHERE digest = $1",
      [digest, hash.toLowerCase()],
    );
    const receipt = await read<TransactionReceipt>(() =>
      deps.client.waitForTransactionReceipt({ hash, timeout: 120_000 }),
    );
    return await complete(deps, digest, receipt, prepared.context, steps.finish);
  } catch (error) {
    // Nothing was broadcast: the signed intent is still unused and may be retried as is.
    if (!sent)
      await ctx.store
        .query("DELETE FROM subscription_relays WHERE digest = $1", [digest])
        .catch(() => undefined);
    throw toManagerError(error);
  }
}

/**
 * Takes the relay's row (undefined), or answers with an earlier attempt's result: done, or sent and
 * waited for. Waits for an attempt in progress; refuses a subscriber past its hourly relays.
 */
async function claimRelay<T, C>(
  deps: ServiceDeps,
  digest: Hex,
  kind: string,
  subscriber: Address,
  steps: RelaySteps<T, C>,
): Promise<{ result: T } | undefined> {
  const { ctx } = deps;
  let polls = 0;
  for (;;) {
    const row = await queryOneParsed(
      ctx.store,
      RelayRowSchema,
      `SELECT status, tx_hash, result,
         floor(extract(epoch FROM now() - updated_at) * 1000)::bigint AS age_ms
       FROM subscription_relays WHERE digest = $1`,
      [digest],
    );
    if (row?.status === "done") return { result: row.result as T };
    if (row?.status === "sent" && row.tx_hash !== null) {
      const receipt = await read<TransactionReceipt>(() =>
        deps.client.waitForTransactionReceipt({ hash: row.tx_hash as Hash, timeout: 120_000 }),
      );
      return { result: await complete(deps, digest, receipt, undefined, steps.finish) };
    }
    if (row?.status === "pending") {
      if (row.age_ms > STALE_RELAY_MS) {
        await ctx.store.query("DELETE FROM subscription_relays WHERE digest = $1 AND status = 'pending'", [
          digest,
        ]);
        continue;
      }
      if (++polls > DUPLICATE_POLLS) {
        throw new TollgateError("RateLimited", "the same request is being relayed; retry shortly", {
          retryAfter: 2,
        });
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
      continue;
    }
    await assertRelayAllowance(deps, subscriber);
    const inserted = await ctx.store.query(
      `INSERT INTO subscription_relays (digest, kind, subscriber) VALUES ($1, $2, $3)
       ON CONFLICT (digest) DO NOTHING RETURNING digest`,
      [digest, kind, subscriber.toLowerCase()],
    );
    if (inserted.length === 1) return undefined;
  }
}

/**
 * The facilitator pays the gas of every relay: one subscriber may not spend it without bound (a
 * pause/resume loop costs the subscriber nothing). Refused requests are not counted.
 */
async function assertRelayAllowance(deps: ServiceDeps, subscriber: Address): Promise<void> {
  const recent = await deps.ctx.store.query<{ n: string }>(
    `SELECT count(*) AS n FROM subscription_relays
     WHERE subscriber = $1 AND created_at > now() - interval '1 hour'`,
    [subscriber.toLowerCase()],
  );
  if (Number(recent[0]?.n ?? 0) >= deps.maxRelaysPerHour) {
    throw new TollgateError(
      "RateLimited",
      `at most ${deps.maxRelaysPerHour} relayed calls per subscriber per hour`,
      {
        retryAfter: 600,
        details: { subscriber },
      },
    );
  }
}

async function complete<T, C>(
  deps: ServiceDeps,
  digest: Hex,
  receipt: TransactionReceipt,
  context: C | undefined,
  finish: (receipt: TransactionReceipt, context: C | undefined) => Promise<T>,
): Promise<T> {
  if (receipt.status !== "success") {
    await deps.ctx.store.query("DELETE FROM subscription_relays WHERE digest = $1", [digest]);
    throw new TollgateError("ChainUnavailable", "the relayed transaction reverted on chain; try again", {
      retryAfter: 1,
      details: { transaction: receipt.transactionHash },
    });
  }
  const result = await finish(receipt, context);
  await deps.ctx.store.query(
    "UPDATE subscription_relays SET status = 'done', result = $2, updated_at = now() WHERE digest = $1",
    [digest, result as Record<string, unknown>],
  );
  return result;
}
