/**
 * Records the outcomes of the claim worker's transactions, as the outbox delivers them: a claim's per-item
 * result (paid, held for good, or what the chain now says), a cooperative close's, and the reopening of
 * either after a reorganisation (channelClaimReorg.ts). Each handler wakes the worker once recorded.
 *
 * Invariant: everything an outcome changes is written in the one `commit` transaction that makes the
 * outbox row final; chain reads happen before it, outside the transaction.
 */
import { type Address, type Hex, parseEventLogs } from "viem";
import {
  type ChannelClaimOutcome,
  decodeChannelClaims,
} from "../../../chain/actions/channels/decodeChannelEvents.ts";
import { getIsBlacklisted } from "../../../chain/actions/usdc/getIsBlacklisted.ts";
import { tollgateChannelsAbi } from "../../../chain/contracts/artifacts/TollgateChannels.ts";
import type { OutboxCommit, OutboxHandler, OutboxOutcome } from "../../../facilitator/outbox/outboxTypes.ts";
import type { Queryable } from "../../../store/store.ts";
import { readChainChannel } from "./channelChain.ts";
import { recordClosed, recordPaid, recordPayeeBlacklisted } from "./channelClaimEvents.ts";
import { recordClaimItem, reopenChannelClaim, reopenChannelClose } from "./channelClaimReorg.ts";
import {
  CHANNEL_CLAIM_KIND,
  CHANNEL_CLOSE_KIND,
  type ChannelClaimWorkerContext,
} from "./channelClaimTypes.ts";
import {
  abandonClose,
  type ChainChannel,
  type ChannelRow,
  channelsOfClaim,
  findChannel,
  finishClaim,
  markClosed,
  raiseClaimed,
} from "./channelRecords.ts";

/** What the chain says of a claim's items its receipt left unsaid, read before the commit. */
type ClaimFacts = {
  /** `claimed` and `closed` on chain, for items the receipt did not pay. */
  chain: Map<string, ChainChannel | undefined>;
  /** Items that failed because the token's issuer blacklisted the payee. */
  blacklisted: Set<string>;
};

const chainOf = (ctx: ChannelClaimWorkerContext, channelId: Hex) =>
  readChainChannel(ctx.publicClient, { chainId: ctx.chainId, contract: ctx.contract }, channelId);
const now = (ctx: ChannelClaimWorkerContext) => new Date(ctx.clock.now());
const itemOf = (decoded: ChannelClaimOutcome[], row: ChannelRow) =>
  decoded.find((d) => d.channelId.toLowerCase() === row.channel_id);

async function readClaimFacts(
  ctx: ChannelClaimWorkerContext,
  rows: ChannelRow[],
  decoded: ChannelClaimOutcome[],
): Promise<ClaimFacts> {
  // Where the receipt does not say what was paid, the chain does.
  const chain = new Map<string, ChainChannel | undefined>();
  for (const row of rows) {
    const item = itemOf(decoded, row);
    if (item === undefined || !item.ok) chain.set(row.channel_id, await chainOf(ctx, row.channel_id as Hex));
  }
  // ClaimFailed says only TransferFailed: whether the token's issuer blacklisted the payee (USDC) is
  // read, for such items alone. Such a claim is held (a newer voucher tries again) and the payee told.
  const blacklisted = new Set<string>();
  for (const row of rows) {
    const item = itemOf(decoded, row);
    if (item === undefined || item.ok || item.reason !== "TransferFailed") continue;
    const listed = await getIsBlacklisted(ctx.publicClient, {
      token: row.token as Address,
      account: row.payee as Address,
    }).catch(() => false);
    if (listed) blacklisted.add(row.channel_id);
  }
  return { chain, blacklisted };
}

/** Ends the flight of each channel in the claim, with what it paid or what the chain holds. */
async function recordClaimRows(
  ctx: ChannelClaimWorkerContext,
  db: Queryable,
  rows: ChannelRow[],
  decoded: ChannelClaimOutcome[],
  facts: ClaimFacts,
  outcome: OutboxOutcome,
) {
  for (const row of rows) {
    const item = itemOf(decoded, row);
    const onChain = facts.chain.get(row.channel_id);
    if (item?.ok === true) {
      await finishClaim(db, row.channel_id as Hex, { claimed: item.cumulativeAmount }, now(ctx));
      await recordPaid(ctx, db, row, item, outcome);
      continue;
    }
    const permanent =
      item !== undefined && !item.ok && ["BadSignature", "AboveDeposit", "NotPayee"].includes(item.reason)
        ? item.reason
        : null;
    const held = facts.blacklisted.has(row.channel_id) ? "AccountBlacklisted" : permanent;
    await finishClaim(
      db,
      row.channel_id as Hex,
      { claimed: onChain?.claimed ?? row.claimed, closed: onChain?.closed ?? false, error: held },
      now(ctx),
    );
    if (held === "AccountBlacklisted") await recordPayeeBlacklisted(ctx, db, row, outcome);
  }
}

/**
 * A channel this claim paid that is in another claim's flight now: a claim a reorganisation undid was
 * sent again after a newer one of the channel (channelClaimReorg.ts). The receipt still says what the
 * chain holds; that claim's outcome ends the flight.
 */
async function recordPaidElsewhere(
  ctx: ChannelClaimWorkerContext,
  db: Queryable,
  rows: ChannelRow[],
  decoded: ChannelClaimOutcome[],
  outcome: OutboxOutcome,
) {
  for (const item of decoded) {
    if (!item.ok || rows.some((r) => r.channel_id === item.channelId.toLowerCase())) continue;
    const row = await findChannel(db, item.channelId);
    if (row === undefined) continue;
    await raiseClaimed(db, item.channelId, item.cumulativeAmount);
    await recordPaid(ctx, db, row, item, outcome);
  }
}

function claimOutcomeHandler(ctx: ChannelClaimWorkerContext, wake: () => void): OutboxHandler {
  return async (outcome, commit) => {
    const rows = await channelsOfClaim(ctx.store, outcome.id);
    const decoded = outcome.status === "confirmed" ? decodeChannelClaims(outcome.logs).outcomes : [];
    const facts = await readClaimFacts(ctx, rows, decoded);
    await commit(async (db) => {
      await recordClaimRows(ctx, db, rows, decoded, facts, outcome);
      await recordPaidElsewhere(ctx, db, rows, decoded, outcome);
    });
    if (outcome.status !== "confirmed" || decoded.some((d) => !d.ok)) {
      ctx.logger.warn(
        { outbox: outcome.id, status: outcome.status, items: decoded.length },
        "channel claim did not pay every item",
      );
    }
    // A voucher or a close the payee asked for that arrived while these channels were in flight was
    // skipped by the rounds since: look again now, not at the next backstop read.
    wake();
  };
}

type ClosedEvent = { args: { claimed: bigint; refunded: bigint } };

/** The watch round saw this close's log first and recorded it: keeps what reopening the close needs. */
async function recordCloseSeenFirst(
  ctx: ChannelClaimWorkerContext,
  outcome: OutboxOutcome,
  commit: OutboxCommit,
  closedEvent: ClosedEvent | undefined,
) {
  // Should a reorganisation undo it (the row's owner is the channel).
  const known = closedEvent === undefined ? undefined : await findChannel(ctx.store, outcome.owner as Hex);
  await commit(async (db) => {
    if (known === undefined || closedEvent === undefined) return;
    await recordClaimItem(db, outcome.id, known.channel_id as Hex, {
      claimedBefore: known.claimed,
      cumulativeAmount: closedEvent.args.claimed,
    });
  });
}

function closeOutcomeHandler(ctx: ChannelClaimWorkerContext, wake: () => void): OutboxHandler {
  return async (outcome, commit) => {
    const rows = await channelsOfClaim(ctx.store, outcome.id);
    const row = rows[0];
    const closedEvent =
      outcome.status === "confirmed"
        ? parseEventLogs({ abi: tollgateChannelsAbi, logs: outcome.logs, eventName: "ChannelClosed" })[0]
        : undefined;
    if (row === undefined) {
      await recordCloseSeenFirst(ctx, outcome, commit, closedEvent);
      return;
    }
    const onChain = closedEvent === undefined ? await chainOf(ctx, row.channel_id as Hex) : undefined;
    await commit(async (db) => {
      if (closedEvent !== undefined) {
        // What the channel held before the close, should a reorganisation undo it (channelClaimReorg.ts).
        await recordClaimItem(db, outcome.id, row.channel_id as Hex, {
          claimedBefore: row.claimed,
          cumulativeAmount: closedEvent.args.claimed,
        });
        if (!(await markClosed(db, row.channel_id as Hex, closedEvent.args.claimed))) return;
        const { claimed, refunded } = closedEvent.args;
        await recordClosed(ctx, db, row, claimed, refunded, outcome.hash, ctx.outbox.sender);
      } else if (onChain?.closed === true) {
        await markClosed(db, row.channel_id as Hex, onChain.claimed);
      } else {
        await abandonClose(db, row.channel_id as Hex, `close ${outcome.status}`);
      }
    });
    wake();
  };
}

/** Hands the outbox the claim worker's outcome and reorganisation handlers. */
export function handleChannelClaimOutcomes(ctx: ChannelClaimWorkerContext, wake: () => void) {
  ctx.outbox.handle(CHANNEL_CLAIM_KIND, claimOutcomeHandler(ctx, wake));
  // A claim a reorganisation undid: its channels are in flight again at what they held before it, and
  // the outbox sends its bytes again; the handler above records that outcome (channelClaimReorg.ts).
  ctx.outbox.onReorg(CHANNEL_CLAIM_KIND, async (tx, row) => {
    await reopenChannelClaim(tx, row.id);
  });
  ctx.outbox.onReorg(CHANNEL_CLOSE_KIND, async (tx, row) => {
    await reopenChannelClose(tx, row.id);
  });
  ctx.outbox.handle(CHANNEL_CLOSE_KIND, closeOutcomeHandler(ctx, wake));
}
