/**
 * The claim worker's enqueueing rounds: a `claimMany` batch when one is due, and the cooperative closes
 * payees asked for.
 *
 * Invariant: a transaction is enqueued in the store transaction that marks its channels in flight
 * (`markClaimInFlight`), so a crash leaves both or neither.
 */
import type { Hex } from "viem";
import { claimChannelsCall } from "../../../chain/actions/channels/claimChannelsCall.ts";
import { closeChannelWithVoucherCall } from "../../../chain/actions/channels/closeChannelWithVoucherCall.ts";
import type { Queryable } from "../../../store/store.ts";
import {
  CHANNEL_CLAIM_KIND,
  CHANNEL_CLOSE_KIND,
  type ChannelClaimWorkerContext,
} from "./channelClaimTypes.ts";
import type { PayeeOperators } from "./channelPayeeOperators.ts";
import {
  abandonClose,
  type ChannelRow,
  claimableChannels,
  claimableSummary,
  closableChannels,
  finishClaim,
  markClaimInFlight,
} from "./channelRecords.ts";
import { servedTokenOf } from "./servedToken.ts";

/** When a claim is due and how large it may be. */
export type ClaimPolicy = { thresholdValue: bigint; maxAgeMs: number; maxBatch: number };

const now = (ctx: ChannelClaimWorkerContext) => new Date(ctx.clock.now());

/**
 * Within the round's transaction: holds the channels that may not be claimed (a fake token's for good,
 * a payee that did not name the gas account its operator until a newer voucher), enqueues one claim of
 * the rest and marks them in flight. Returns the number of channels in it.
 */
async function enqueueClaim(
  ctx: ChannelClaimWorkerContext,
  db: Queryable,
  maxBatch: number,
  refused: Set<string>,
  operators: PayeeOperators,
): Promise<number> {
  const all = await claimableChannels(db, ctx.contract, maxBatch);
  const locked: ChannelRow[] = [];
  for (const r of all) {
    if (ctx.tokenPause?.isPaused(r.token) === true) continue;
    if (servedTokenOf(ctx.tokens, r) !== undefined) locked.push(r);
    // A fake token's channel (servedToken.ts): held for good, never claimed on its behalf.
    else
      await finishClaim(db, r.channel_id as Hex, { claimed: r.claimed, error: "UnsupportedToken" }, now(ctx));
  }
  const rows = locked.filter((r) => !refused.has(r.payee) && operators.known(r.payee));
  for (const r of locked.filter((r) => refused.has(r.payee))) {
    // Held until the payee names the gas account its operator; a newer voucher clears it and the
    // operator right is read again then.
    await finishClaim(db, r.channel_id as Hex, { claimed: r.claimed, error: "NotOperator" }, now(ctx));
  }
  if (rows.length === 0) return 0;
  const claims = rows.map((r) => ({
    channelId: r.channel_id as Hex,
    cumulativeAmount: r.voucher_amount,
    signature: r.voucher_signature as Hex,
  }));
  const outboxId = await ctx.outbox.enqueue(db, {
    kind: CHANNEL_CLAIM_KIND,
    owner: `claim:${rows.length}`,
    ...claimChannelsCall({ channels: ctx.contract, claims }),
  });
  await markClaimInFlight(
    db,
    outboxId,
    claims.map((c) => c.channelId),
  );
  return rows.length;
}

/** Enqueues one claim batch if one is due; returns the number of channels in it. */
export async function claimRound(
  ctx: ChannelClaimWorkerContext,
  policy: ClaimPolicy,
  operators: PayeeOperators,
): Promise<number> {
  const summary = await claimableSummary(ctx.store, ctx.contract);
  if (summary.count === 0) return 0;
  const age = summary.oldest === null ? 0 : ctx.clock.now() - summary.oldest.getTime();
  if (summary.value < policy.thresholdValue && summary.closing === 0 && age < policy.maxAgeMs) return 0;
  // Operator rights are read outside the store transaction (chain reads hold no locks).
  const payees = await claimableChannels(ctx.store, ctx.contract, policy.maxBatch);
  const refused = new Set<string>();
  for (const payee of new Set(payees.map((r) => r.payee))) {
    if (!(await operators.mayClaimFor(payee))) refused.add(payee);
  }
  return ctx.store.transaction((db) => enqueueClaim(ctx, db, policy.maxBatch, refused, operators));
}

/** Enqueues the cooperative closes payees asked for. */
export async function closeRound(ctx: ChannelClaimWorkerContext): Promise<number> {
  return ctx.store.transaction(async (db) => {
    const rows = await closableChannels(db, ctx.contract, 20);
    let sent = 0;
    for (const r of rows) {
      if (ctx.tokenPause?.isPaused(r.token) === true) continue;
      if (servedTokenOf(ctx.tokens, r) === undefined) {
        await abandonClose(db, r.channel_id as Hex, "UnsupportedToken");
        continue;
      }
      const paysMore = r.voucher_amount > r.claimed && r.voucher_signature !== null;
      const outboxId = await ctx.outbox.enqueue(db, {
        kind: CHANNEL_CLOSE_KIND,
        owner: r.channel_id,
        ...closeChannelWithVoucherCall({
          channels: ctx.contract,
          channelId: r.channel_id as Hex,
          cumulativeAmount: paysMore ? r.voucher_amount : r.claimed,
          signature: paysMore ? (r.voucher_signature as Hex) : "0x",
        }),
      });
      await markClaimInFlight(db, outboxId, [r.channel_id as Hex]);
      sent += 1;
    }
    return sent;
  });
}
