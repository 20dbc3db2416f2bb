/**
 * The channel claim worker: turns the latest vouchers of many channels into one `claimMany` through the
 * outbox, does the cooperative closes payees asked for, and watches the chain for close requests and
 * closes made elsewhere (docs/channels.md, "Claims").
 *
 * When it claims: once the unclaimed value reaches `thresholdValue`, once the oldest unclaimed voucher
 * is `maxAgeMs` old, and at once when a payer asked to close a channel holding an unclaimed voucher (the
 * claim must land before the payer may withdraw). A channel in flight is skipped by the rounds; the
 * worker looks again as soon as its outcome is recorded, so a voucher or close that came meanwhile waits
 * for nothing else.
 *
 * Invariants:
 * - A claim is enqueued in the store transaction that marks its channels in flight (claim_outbox_id), so
 *   a crash either leaves both or neither; the outbox handler clears the mark with the outcome, exactly
 *   once across crashes and instances. A channel is in at most one claim or close at a time.
 * - Outcomes come from the receipt's per-item events; where a receipt says nothing (reverted, dropped,
 *   deferred, NothingNew), `claimed` is read back from the chain, which is the truth. A claim can never
 *   pay twice: the contract pays `cumulative − claimed`.
 * - A confirmed claim a reorganisation undid is reopened by the outbox's watch (channelClaimReorg.ts):
 *   its channels are in flight again at what they held before it, its bytes are sent again, and its new
 *   outcome is recorded here as a first one; `channel.claimed` announces nothing twice.
 */
import type { Logger } from "pino";
import { type Address, getAddress, type Hex, type PublicClient, parseEventLogs } from "viem";
import { claimChannelsCall } from "../../../chain/actions/channels/claimChannelsCall.ts";
import { closeChannelWithVoucherCall } from "../../../chain/actions/channels/closeChannelWithVoucherCall.ts";
import { decodeChannelClaims } from "../../../chain/actions/channels/decodeChannelEvents.ts";
import { getIsChannelOperator } from "../../../chain/actions/channels/getIsChannelOperator.ts";
import { pageLogRanges } from "../../../chain/actions/getLogsPaged.ts";
import { getIsBlacklisted } from "../../../chain/actions/usdc/getIsBlacklisted.ts";
import { tollgateChannelsAbi } from "../../../chain/contracts/artifacts/TollgateChannels.ts";
import { acquireChainWatch, type WatchedClient } from "../../../facilitator/chainWatch.ts";
import type { Outbox, OutboxOutcome } from "../../../facilitator/outbox/outboxTypes.ts";
import type { TokenPauseWatch } from "../../../facilitator/tokenPauseWatch.ts";
import { createWakeablePause, IDLE_BACKSTOP_MS } from "../../../facilitator/wakeablePause.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { Queryable, Store } from "../../../store/store.ts";
import { readChainChannel } from "./channelChain.ts";
import {
  announcedAmount,
  recordClaimItem,
  reopenChannelClaim,
  reopenChannelClose,
} from "./channelClaimReorg.ts";
import {
  abandonClose,
  type ChainChannel,
  type ChannelRow,
  channelsOfClaim,
  claimableChannels,
  claimableSummary,
  closableChannels,
  findChannel,
  finishClaim,
  markClaimInFlight,
  markClosed,
  markCloseRequested,
  raiseClaimed,
  upsertChannel,
  watchedChannels,
} from "./channelRecords.ts";
import { servedTokenOf } from "./servedToken.ts";

export const CHANNEL_CLAIM_KIND = "channel-claim";
export const CHANNEL_CLOSE_KIND = "channel-close";

/** Blocks per log query when following the chain for close requests and closes. */
const MAX_LOG_RANGE = 2_000n;

export type ChannelClaimWorkerOptions = {
  /** Claim once this much (smallest unit, all channels together) is unclaimed. Default 1 000 000. */
  thresholdValue?: bigint | undefined;
  /** Claim once the oldest unclaimed voucher is this old, whatever its value. Default 10 minutes. */
  maxAgeMs?: number | undefined;
  /**
   * Longest pause between rounds (default 30 s). New vouchers (`signal`) and the contract's logs
   * (chainWatch.ts: a close request, a close) wake the worker at once.
   */
  intervalMs?: number | undefined;
  /** Items per `claimMany`. Default 100. */
  maxBatch?: number | undefined;
  /** How long a payee's operator right (or its absence) is trusted before it is read again. Default 60 s. */
  operatorCacheMs?: number | undefined;
};

export type ChannelClaimWorkerContext = {
  store: Store;
  publicClient: Pick<PublicClient, "readContract" | "getContractEvents"> & WatchedClient;
  outbox: Pick<Outbox, "enqueue" | "wake" | "handle" | "onReorg" | "sender">;
  chainId: number;
  /** Most blocks one `eth_getLogs` call spans (default 2 000). */
  logsRange?: number | undefined;
  contract: Address;
  /** The tokens served: a row of another (one kept before rows were limited to them) is never sent. */
  tokens: readonly { address: Address }[];
  clock: Clock;
  logger: Logger;
  recordEvent(db: Queryable, type: string, data: Record<string, unknown>): Promise<void>;
  /**
   * Whether a token's issuer paused it (tokenPauseWatch.ts): its channels' claims and closes wait in
   * the table (a claim would move no money and a close would revert) until the unpause wakes the worker.
   */
  tokenPause?: Pick<TokenPauseWatch, "isPaused" | "onResume"> | undefined;
};

export function createChannelClaimWorker(
  ctx: ChannelClaimWorkerContext,
  options: ChannelClaimWorkerOptions = {},
) {
  const thresholdValue = options.thresholdValue ?? 1_000_000n;
  const maxAgeMs = options.maxAgeMs ?? 600_000;
  const intervalMs = options.intervalMs ?? IDLE_BACKSTOP_MS;
  const maxBatch = options.maxBatch ?? 100;
  const where = { chainId: ctx.chainId, contract: ctx.contract };
  const pause = createWakeablePause();
  let running: Promise<void> | undefined;
  let stopping = false;
  let fromBlock: bigint | undefined;
  const logsRange = BigInt(ctx.logsRange ?? MAX_LOG_RANGE);
  /** The contract may have new logs (the chain watch said so); the logs are also read every `intervalMs`. */
  let chainDirty = true;
  let lastWatch = Number.NEGATIVE_INFINITY;
  let releaseWatch: (() => void) | undefined;
  /** Set by `signal` and the chain watch: a wake-up during a round is not lost. */
  let woken = false;
  /** Payees known to have named (or not named) the gas account their operator, and until when. */
  const operatorOf = new Map<string, { allowed: boolean; until: number }>();
  const operatorCacheMs = options.operatorCacheMs ?? 60_000;

  /** Whether the gas account may claim for `payee`: a claim it may not make would only burn gas. */
  async function mayClaimFor(payee: string): Promise<boolean> {
    const known = operatorOf.get(payee);
    if (known !== undefined && known.until > ctx.clock.now()) return known.allowed;
    const allowed =
      payee === ctx.outbox.sender.toLowerCase() ||
      (await getIsChannelOperator(ctx.publicClient, {
        channels: ctx.contract,
        payee: payee as Address,
        operator: ctx.outbox.sender,
      }));
    operatorOf.set(payee, { allowed, until: ctx.clock.now() + operatorCacheMs });
    return allowed;
  }

  const now = () => new Date(ctx.clock.now());
  /** Cuts the pause short; a wake-up during a round makes the loop run another at once. */
  function wake() {
    woken = true;
    pause.wake();
  }
  const chainOf = async (channelId: Hex): Promise<ChainChannel | undefined> =>
    readChainChannel(ctx.publicClient, where, channelId);

  // ---------------------------------------------------------------- outcomes

  /**
   * Records what a claim's receipt says it paid on a channel and announces it with `channel.claimed`,
   * less what an earlier event announced (a claim sent again after a reorganisation; channelClaimReorg.ts).
   */
  async function recordPaid(
    db: Queryable,
    row: Pick<ChannelRow, "channel_id" | "payer" | "payee" | "token">,
    item: { cumulativeAmount: bigint; amount: bigint },
    outcome: OutboxOutcome,
  ) {
    const paid = {
      claimedBefore: item.cumulativeAmount - item.amount,
      cumulativeAmount: item.cumulativeAmount,
    };
    await recordClaimItem(db, outcome.id, row.channel_id as Hex, paid);
    const announced = await announcedAmount(db, row.channel_id as Hex, paid);
    if (announced === 0n) return;
    await ctx.recordEvent(db, "channel.claimed", {
      provider: row.payee,
      channelId: row.channel_id,
      payer: getAddress(row.payer),
      payee: getAddress(row.payee),
      token: getAddress(row.token),
      cumulativeAmount: item.cumulativeAmount.toString(),
      amount: announced.toString(),
      transaction: outcome.status === "confirmed" ? outcome.hash : null,
    });
  }

  ctx.outbox.handle(CHANNEL_CLAIM_KIND, async (outcome, commit) => {
    const id = outcome.id;
    const rows = await channelsOfClaim(ctx.store, id);
    const decoded = outcome.status === "confirmed" ? decodeChannelClaims(outcome.logs).outcomes : [];
    // Where the receipt does not say what was paid, the chain does.
    const chain = new Map<string, ChainChannel | undefined>();
    for (const row of rows) {
      const item = decoded.find((d) => d.channelId.toLowerCase() === row.channel_id);
      if (item === undefined || !item.ok) chain.set(row.channel_id, await chainOf(row.channel_id as Hex));
    }
    // ClaimFailed says only TransferFailed: whether the token's issuer blacklisted the payee (USDC) is
    // read, for such items alone. Such a claim is held (a newer voucher tries again) and the payee told.
    const blacklisted = new Set<string>();
    for (const row of rows) {
      const item = decoded.find((d) => d.channelId.toLowerCase() === row.channel_id);
      if (item === undefined || item.ok || item.reason !== "TransferFailed") continue;
      const listed = await getIsBlacklisted(ctx.publicClient, {
        token: row.token as Address,
        account: row.payee as Address,
      }).catch(() => false);
      if (listed) blacklisted.add(row.channel_id);
    }
    await commit(async (db) => {
      for (const row of rows) {
        const item = decoded.find((d) => d.channelId.toLowerCase() === row.channel_id);
        const onChain = chain.get(row.channel_id);
        if (item?.ok === true) {
          await finishClaim(db, row.channel_id as Hex, { claimed: item.cumulativeAmount }, now());
          await recordPaid(db, row, item, outcome);
          continue;
        }
        const permanent =
          item !== undefined && !item.ok && ["BadSignature", "AboveDeposit", "NotPayee"].includes(item.reason)
            ? item.reason
            : null;
        const held = blacklisted.has(row.channel_id) ? "AccountBlacklisted" : permanent;
        await finishClaim(
          db,
          row.channel_id as Hex,
          { claimed: onChain?.claimed ?? row.claimed, closed: onChain?.closed ?? false, error: held },
          now(),
        );
        if (held === "AccountBlacklisted") {
          await ctx.recordEvent(db, "channel.claim_failed", {
            provider: row.payee,
            channelId: row.channel_id,
            payer: getAddress(row.payer),
            payee: getAddress(row.payee),
            token: getAddress(row.token),
            cumulativeAmount: row.voucher_amount.toString(),
            code: "AccountBlacklisted",
            message: `the token's issuer has blacklisted the payee ${getAddress(row.payee)}; the token refuses to pay it`,
            account: getAddress(row.payee),
            role: "payee",
            transaction: outcome.status === "confirmed" ? outcome.hash : null,
          });
        }
      }
      // A channel this claim paid that is in another claim's flight now: a claim a reorganisation undid
      // was sent again after a newer one of the channel (channelClaimReorg.ts). The receipt still says
      // what the chain holds; that claim's outcome ends the flight.
      for (const item of decoded) {
        if (!item.ok || rows.some((r) => r.channel_id === item.channelId.toLowerCase())) continue;
        const row = await findChannel(db, item.channelId);
        if (row === undefined) continue;
        await raiseClaimed(db, item.channelId, item.cumulativeAmount);
        await recordPaid(db, row, item, outcome);
      }
    });
    if (outcome.status !== "confirmed" || decoded.some((d) => !d.ok)) logOutcome(outcome, decoded.length);
    // A voucher or a close the payee asked for that arrived while these channels were in flight was
    // skipped by the rounds since: look again now, not at the next backstop read.
    wake();
  });

  // A claim a reorganisation undid: its channels are in flight again at what they held before it, and
  // the outbox sends its bytes again; the handler above records that outcome (channelClaimReorg.ts).
  ctx.outbox.onReorg(CHANNEL_CLAIM_KIND, async (tx, row) => {
    await reopenChannelClaim(tx, row.id);
  });
  ctx.outbox.onReorg(CHANNEL_CLOSE_KIND, async (tx, row) => {
    await reopenChannelClose(tx, row.id);
  });

  ctx.outbox.handle(CHANNEL_CLOSE_KIND, async (outcome, commit) => {
    const rows = await channelsOfClaim(ctx.store, outcome.id);
    const row = rows[0];
    const closedEvent =
      outcome.status === "confirmed"
        ? parseEventLogs({ abi: tollgateChannelsAbi, logs: outcome.logs, eventName: "ChannelClosed" })[0]
        : undefined;
    if (row === undefined) {
      // The watch round saw this close's log first and recorded it: keep what reopening the close
      // needs should a reorganisation undo it (the row's owner is the channel).
      const known =
        closedEvent === undefined ? undefined : await findChannel(ctx.store, outcome.owner as Hex);
      await commit(async (db) => {
        if (known === undefined || closedEvent === undefined) return;
        await recordClaimItem(db, outcome.id, known.channel_id as Hex, {
          claimedBefore: known.claimed,
          cumulativeAmount: closedEvent.args.claimed,
        });
      });
      return;
    }
    const onChain = closedEvent === undefined ? await chainOf(row.channel_id as Hex) : undefined;
    await commit(async (db) => {
      if (closedEvent !== undefined) {
        // What the channel held before the close, should a reorganisation undo it (channelClaimReorg.ts).
        await recordClaimItem(db, outcome.id, row.channel_id as Hex, {
          claimedBefore: row.claimed,
          cumulativeAmount: closedEvent.args.claimed,
        });
        if (!(await markClosed(db, row.channel_id as Hex, closedEvent.args.claimed))) return;
        await recordClosed(
          db,
          row,
          closedEvent.args.claimed,
          closedEvent.args.refunded,
          outcome.hash,
          ctx.outbox.sender,
        );
      } else if (onChain?.closed === true) {
        await markClosed(db, row.channel_id as Hex, onChain.claimed);
      } else {
        await abandonClose(db, row.channel_id as Hex, `close ${outcome.status}`);
      }
    });
    wake();
  });

  function logOutcome(outcome: OutboxOutcome, items: number) {
    ctx.logger.warn(
      { outbox: outcome.id, status: outcome.status, items },
      "channel claim did not pay every item",
    );
  }

  async function recordClosed(
    db: Queryable,
    row: Pick<ChannelRow, "channel_id" | "payer" | "payee" | "token">,
    claimed: bigint,
    refunded: bigint,
    transaction: Hex | null,
    by: Address,
  ) {
    await ctx.recordEvent(db, "channel.closed", {
      provider: row.payee,
      channelId: row.channel_id,
      payer: getAddress(row.payer),
      payee: getAddress(row.payee),
      token: getAddress(row.token),
      claimed: claimed.toString(),
      refunded: refunded.toString(),
      /** Who sent the closing transaction: the payee or its operator, or anyone withdrawing for the payer. */
      by: getAddress(by),
      transaction,
    });
  }

  // ---------------------------------------------------------------- rounds

  /** Enqueues one claim batch if one is due; returns the number of channels in it. */
  async function claimRound(): Promise<number> {
    const summary = await claimableSummary(ctx.store, ctx.contract);
    if (summary.count === 0) return 0;
    const age = summary.oldest === null ? 0 : ctx.clock.now() - summary.oldest.getTime();
    if (summary.value < thresholdValue && summary.closing === 0 && age < maxAgeMs) return 0;
    // Operator rights are read outside the store transaction (chain reads hold no locks).
    const payees = await claimableChannels(ctx.store, ctx.contract, maxBatch);
    const refused = new Set<string>();
    for (const payee of new Set(payees.map((r) => r.payee))) {
      if (!(await mayClaimFor(payee))) refused.add(payee);
    }
    return ctx.store.transaction(async (db) => {
      const all = await claimableChannels(db, ctx.contract, maxBatch);
      const locked: ChannelRow[] = [];
      for (const r of all) {
        if (ctx.tokenPause?.isPaused(r.token) === true) continue;
        if (servedTokenOf(ctx.tokens, r) !== undefined) locked.push(r);
        // A fake token's channel (servedToken.ts): held for good, never claimed on its behalf.
        else
          await finishClaim(
            db,
            r.channel_id as Hex,
            { claimed: r.claimed, error: "UnsupportedToken" },
            now(),
          );
      }
      const rows = locked.filter((r) => !refused.has(r.payee) && operatorOf.get(r.payee)?.allowed === true);
      for (const r of locked.filter((r) => refused.has(r.payee))) {
        // Held until the payee names the gas account its operator; a newer voucher clears it and the
        // operator right is read again then.
        await finishClaim(db, r.channel_id as Hex, { claimed: r.claimed, error: "NotOperator" }, now());
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
    });
  }

  /** Enqueues the cooperative closes payees asked for. */
  async function closeRound(): Promise<number> {
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

  /** Learns of close requests and closes made on chain by payers (or anyone) since the last look. */
  async function watchRound(): Promise<void> {
    const latest = await ctx.publicClient.getBlockNumber({ cacheTime: 0 });
    if (fromBlock === undefined) {
      // First look since start: read every watched channel once, then follow the logs.
      for (const row of await watchedChannels(ctx.store, ctx.contract, 1_000)) {
        const chain = await chainOf(row.channel_id as Hex);
        if (chain !== undefined) await upsertChannel(ctx.store, chain);
      }
      fromBlock = latest + 1n;
      return;
    }
    if (latest < fromBlock) return;
    // Public RPCs cap a log query's block range: follow the chain in steps.
    const toBlock = latest - fromBlock >= logsRange ? fromBlock + logsRange - 1n : latest;
    // And within a step, in pages the provider accepts (narrower when it refuses one as too large).
    const logs = await pageLogRanges(
      ctx.publicClient,
      { fromBlock, toBlock, maxRange: logsRange },
      (from, to) =>
        ctx.publicClient.getContractEvents({
          address: ctx.contract,
          abi: tollgateChannelsAbi,
          fromBlock: from,
          toBlock: to,
        }),
    );
    for (const log of logs) {
      if (log.eventName === "CloseRequested") {
        const { channelId, requestedAt } = log.args as { channelId: Hex; requestedAt: bigint };
        await markCloseRequested(ctx.store, channelId, Number(requestedAt));
      } else if (log.eventName === "ChannelClosed") {
        const { channelId, claimed, refunded, by } = log.args as {
          channelId: Hex;
          claimed: bigint;
          refunded: bigint;
          by: Address;
        };
        await ctx.store.transaction(async (db) => {
          const row = await findChannel(db, channelId);
          if (row === undefined || !(await markClosed(db, channelId, claimed))) return;
          await recordClosed(db, row, claimed, refunded, log.transactionHash, by);
        });
      }
    }
    fromBlock = toBlock + 1n;
  }

  /**
   * One round: watch, close, claim. Returns how many channels were put in a transaction. The chain is
   * read when it may have news (`force`, the chain watch, or `intervalMs` since the last read).
   */
  async function round(force = true): Promise<number> {
    if (force || chainDirty || Date.now() - lastWatch >= intervalMs) {
      chainDirty = false;
      lastWatch = Date.now();
      try {
        await watchRound();
      } catch (error) {
        chainDirty = true;
        throw error;
      }
    }
    const closes = await closeRound();
    const claims = await claimRound();
    if (closes + claims > 0) ctx.outbox.wake();
    return closes + claims;
  }

  async function loop() {
    while (!stopping) {
      try {
        woken = false;
        await round(false);
      } catch (error) {
        ctx.logger.warn({ err: error }, "channel claim round failed; retrying");
      }
      if (!stopping && !woken) await pause.pause(intervalMs);
    }
  }

  return {
    /** Runs one round now (tests, and `flush` on demand). */
    round,
    /** Cuts the pause short: new vouchers or a close request arrived. */
    signal: wake,
    async start() {
      if (running !== undefined) return;
      stopping = false;
      const shared = acquireChainWatch(ctx.publicClient, ctx.logger);
      const stopWatching = shared.watch.watch(ctx.contract, () => {
        chainDirty = true;
        wake();
      });
      const stopResume = ctx.tokenPause?.onResume(wake);
      releaseWatch = () => {
        stopWatching();
        stopResume?.();
        shared.release();
      };
      running = loop();
    },
    async stop() {
      stopping = true;
      pause.wake();
      await running;
      running = undefined;
      releaseWatch?.();
      releaseWatch = undefined;
    },
  };
}

export type ChannelClaimWorker = ReturnType<typeof createChannelClaimWorker>;
