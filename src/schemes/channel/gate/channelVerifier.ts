/**
 * The request path of the `channel` scheme at the gate: check a voucher locally and charge it.
 *
 * Per request: parse the header (no JSON, no zod), find the channel in the cache (fetched once from the
 * source, then refreshed in the background every `refreshMs`), check it is this gate's (payee, token)
 * on the offer's terms and open, verify the P-256 signature over the 160-byte message (one
 * `crypto.verify`), check the deposit, then charge the voucher store — which persists the new tally
 * before this resolves. No facilitator or chain round trip unless the channel is new to this gate, its
 * cached state is older than `maxStaleMs` (a channel idle that long), or the voucher exceeds the cached
 * deposit (a top-up).
 *
 * Invariants:
 * - A request passes only after `store.charge` resolved with `charged`: the voucher it paid with is
 *   durable before the handler runs, so no answer is ever given for a voucher the seller could lose.
 * - A voucher is accepted only for a channel whose payee and token are this gate's, signed by that
 *   channel's session key over this chain id and contract: one for another channel, seller, chain or
 *   contract fails the signature check or the payee check.
 * - A voucher is accepted only for a channel whose tag (its salt's first 8 bytes, kept on chain) is the
 *   store's `tag`: a channel is served by the gates of one voucher store only, so its vouchers' value is
 *   charged once however many gates the seller runs (docs/channels.md, "One voucher, one gate").
 * - A voucher above the deposit is never accepted (after one refetch of the channel, for a top-up).
 * - A channel whose close delay is under `minCloseDelay`, or whose deposit is under the offer's minimum
 *   (`minDeposit`, at least the price), is refused, whoever opened it: the offer states both and a payer
 *   may open on chain itself, past the facilitator's own minimum.
 * - The seller is never served out of time to claim: a voucher is served only against channel state read
 *   at most `maxStaleMs` before (a cached entry older than that is refetched before it serves), so a close
 *   requested after that read opens the withdrawal at least `closeDelay − maxStaleMs` later; and
 *   `minCloseDelay ≥ closeMarginSeconds + maxStaleMs` is required at creation. Hence once a close is
 *   requested the gate stops serving with at least `closeMarginSeconds` left to claim — by the refusal
 *   below once it knows of the request, by the bound while it does not. (A source whose chain node lags
 *   adds its lag to the bound: `GET /channels/:id` reads the chain on every call, nothing cached.) Busy
 *   channels refresh in the background every `refreshMs` (< `maxStaleMs`), so the hot path does not
 *   wait for the source; a failing source fails requests once the state is `maxStaleMs` old.
 * - A channel that is closed, or whose close was requested and whose withdrawal opens within
 *   `closeMarginSeconds`, is refused: the seller keeps that margin to claim what it served.
 * - A channel sealed in the store (a cooperative close began) is refused, by every instance sharing it.
 * - Refusals are data (`ok: false` with a gate error code); only a fault of the source or store throws.
 *
 * Its parts: the cache of channel state (channelCache.ts), the checks of a channel's terms
 * (`termsRefusal`), the refetch for a top-up (`coveringState`) and the charge itself (`chargeVoucher`).
 */
import { verify } from "node:crypto";
import type { Address, Hex } from "viem";
import {
  type ChannelVoucherDomain,
  channelVoucherMessageFrom,
  type ParsedChannelVoucher,
  safeParseChannelVoucher,
} from "../../../protocol/channelVoucher.ts";
import { type Clock, systemClock } from "../../../protocol/clock.ts";
import { type GateErrorCode, TollgateError } from "../../../protocol/errors.ts";
import type { ChannelLookupContext, ChannelState, ChannelStateSource } from "../channelState.ts";
import { type CachedChannel, type ChannelCache, createChannelCache } from "./channelCache.ts";
import type { ChannelTally, VoucherStore } from "./voucherStore.ts";

export type ChannelVerifierOptions = ChannelVoucherDomain & {
  /** This gate's payee: only channels paying it are accepted. */
  payTo: Address;
  token: Address;
  source: ChannelStateSource;
  store: VoucherStore;
  /** The store's tag (`store.tag()`): only channels opened with it are served. */
  tag: Hex;
  clock?: Clock | undefined;
  /** Refuse a closing channel this long before its withdrawal opens (default 600 s). */
  closeMarginSeconds?: number | undefined;
  /**
   * The shortest close delay served, seconds (the offer's `minCloseDelay`; default 3 600). Must be at
   * least `closeMarginSeconds` + `maxStaleMs`: else a close could go unseen until inside the margin.
   */
  minCloseDelay?: number | undefined;
  /** The smallest deposit served, smallest unit (the offer's `minDeposit`; default 0: the price). */
  minDeposit?: bigint | undefined;
  /** Refetch a cached channel in the background after this long (default 15 000 ms). */
  refreshMs?: number | undefined;
  /** Never serve from a cached channel older than this: refetch it first (default 30 000 ms). */
  maxStaleMs?: number | undefined;
  /** Remember an unknown channel id this long (default 5 000 ms), so random ids cost one fetch. */
  unknownTtlMs?: number | undefined;
  /** Channels cached at most (default 100 000); the oldest are dropped first. */
  maxChannels?: number | undefined;
  /** Told when a cached channel is seen closing (a close was requested): forward its vouchers now. */
  onClosing?: ((channelId: Hex) => void) | undefined;
};

/** A charged request. */
export type ChannelCharge = {
  ok: true;
  channelId: Hex;
  payer: Address;
  /** The voucher's cumulative amount. */
  cumulativeAmount: bigint;
  price: bigint;
  tally: ChannelTally;
  deposit: bigint;
};

export type ChannelRefusal = {
  ok: false;
  error: GateErrorCode;
  message: string;
  details?: Record<string, string> | undefined;
};

export type ChannelVerifier = {
  /**
   * Checks the voucher header and charges `price` on its channel. `context.client`: the paying client,
   * whose share of unknown-id reads a lookup of a channel new to the gate spends.
   */
  charge(
    header: string,
    price: bigint,
    context?: ChannelLookupContext,
  ): Promise<ChannelCharge | ChannelRefusal>;
  /** Gives back a charge whose request was not served (the handler failed). */
  refund(charge: ChannelCharge): Promise<void>;
  /** The cached state of a channel, fetching it when unknown. */
  channel(channelId: Hex): Promise<ChannelState | undefined>;
};

/** How old a cached channel may be and still serve, unless configured (`maxStaleMs`). */
export const DEFAULT_CHANNEL_MAX_STALE_MS = 30_000;

const refuse = (error: GateErrorCode, message: string, details?: Record<string, string>): ChannelRefusal => ({
  ok: false,
  error,
  message,
  details,
});

/** What a charge is checked against: the verifier's settings, lower-cased addresses and its cache. */
type VerifierContext = {
  store: VoucherStore;
  clock: Clock;
  closeMarginSeconds: number;
  minCloseDelay: number;
  minDeposit: bigint;
  payTo: string;
  token: string;
  tag: string;
  channels: ChannelCache;
};

/** Closed, or its withdrawal opens within the margin. */
const closingOf = (v: VerifierContext, state: ChannelState): boolean =>
  state.closed ||
  (state.closeRequestedAt !== 0 &&
    v.clock.now() / 1000 >= state.closeRequestedAt + state.closeDelay - v.closeMarginSeconds);

/** The refusal of a channel that is not this gate's, or not on the offer's terms, or closing. */
function termsRefusal(v: VerifierContext, state: ChannelState, price: bigint): ChannelRefusal | undefined {
  if (state.payee.toLowerCase() !== v.payTo) {
    return refuse("ChannelVoucherInvalid", "the channel pays another payee");
  }
  if (state.token.toLowerCase() !== v.token)
    return refuse("ChannelVoucherInvalid", "the channel holds another token");
  if (state.tag?.toLowerCase() !== v.tag) {
    // Another gate's (another voucher store's) channel: its vouchers are charged there, and a store
    // cannot see what another charged, so serving them here would serve their value twice.
    return refuse("ChannelVoucherInvalid", "the channel was opened for another gate", { tag: v.tag });
  }
  if (closingOf(v, state)) {
    return refuse("ChannelClosing", state.closed ? "the channel is closed" : "the channel is closing");
  }
  if (state.closeDelay < v.minCloseDelay) {
    // A payer could ask to close and withdraw before this gate's vouchers can be claimed.
    return refuse("ChannelVoucherInvalid", "the channel's close delay is under this gate's minimum", {
      closeDelay: String(state.closeDelay),
      minCloseDelay: String(v.minCloseDelay),
    });
  }
  const minimum = v.minDeposit > price ? v.minDeposit : price;
  if (state.deposit < minimum) {
    // Checked on the cached state: a top-up is seen at the next refresh, never at a payer's request.
    return refuse("ChannelVoucherInvalid", "the channel's deposit is under this gate's minimum", {
      deposit: state.deposit.toString(),
      minDeposit: minimum.toString(),
    });
  }
  return undefined;
}

/** The channel's state once the voucher is within its deposit (after one refetch, for a top-up). */
async function coveringState(
  v: VerifierContext,
  voucher: ParsedChannelVoucher,
  entry: CachedChannel,
  context: ChannelLookupContext | undefined,
): Promise<ChannelState | ChannelRefusal> {
  if (voucher.cumulativeAmount <= entry.state.deposit) return entry.state;
  // Perhaps topped up since it was cached: the deposit only grows, so one refetch settles it.
  const state = ((await v.channels.fetch(voucher.channelId, context)) ?? entry).state;
  if (closingOf(v, state)) return refuse("ChannelClosing", "the channel is closing");
  if (voucher.cumulativeAmount > state.deposit) {
    return refuse("ChannelDepositExhausted", "the voucher is above the channel's deposit", {
      deposit: state.deposit.toString(),
    });
  }
  return state;
}

/** Checks the voucher header against its channel, then charges `price` in the store. */
async function chargeVoucher(
  v: VerifierContext,
  header: string,
  price: bigint,
  context: ChannelLookupContext | undefined,
): Promise<ChannelCharge | ChannelRefusal> {
  const parsed = safeParseChannelVoucher(header);
  if (!parsed.ok) return refuse("ChannelVoucherInvalid", `malformed channel voucher: ${parsed.reason}`);
  const voucher = parsed.voucher;
  const entry = await v.channels.lookup(voucher.channelId, context);
  if (entry === undefined) return refuse("ChannelVoucherInvalid", "no such channel");
  const refusal = termsRefusal(v, entry.state, price);
  if (refusal !== undefined) return refusal;
  const message = channelVoucherMessageFrom(entry.prefix, voucher.cumulativeAmount);
  if (!verify("sha256", message, entry.verifyKey, voucher.signature)) {
    return refuse("ChannelVoucherInvalid", "the voucher is not signed by the channel's session key");
  }
  const state = await coveringState(v, voucher, entry, context);
  if ("ok" in state) return state;
  const outcome = await v.store.charge({
    channelId: voucher.channelId,
    cumulativeAmount: voucher.cumulativeAmount,
    signature: voucher.signature,
    price,
    floor: state.claimed,
  });
  if (outcome.sealed === true) {
    return refuse("ChannelClosing", "the channel is being closed cooperatively");
  }
  if (!outcome.charged) {
    return refuse(
      "ChannelVoucherStale",
      "the voucher does not cover this request: sign a higher cumulative amount",
      {
        highest: outcome.tally.highest.toString(),
        spent: outcome.tally.spent.toString(),
        price: price.toString(),
      },
    );
  }
  return {
    ok: true,
    channelId: voucher.channelId,
    payer: state.payer,
    cumulativeAmount: voucher.cumulativeAmount,
    price,
    tally: outcome.tally,
    deposit: state.deposit,
  };
}

/**
 * @example
 * const verifier = createChannelVerifier({ chainId: 8453, channels, payTo, token,
 *   source: guardChannelSource(createFacilitatorChannelSource(facilitator, apiKey), { payTo, token }),
 *   store: await createJournalVoucherStore({ path }) });
 * const result = await verifier.charge(request.headers.get("x-tollgate-channel") ?? "", 1_000n);
 */
export function createChannelVerifier(options: ChannelVerifierOptions): ChannelVerifier {
  const clock = options.clock ?? systemClock;
  const closeMarginSeconds = options.closeMarginSeconds ?? 600;
  const minCloseDelay = options.minCloseDelay ?? 3_600;
  const maxStaleMs = options.maxStaleMs ?? DEFAULT_CHANNEL_MAX_STALE_MS;
  const refreshMs = Math.min(options.refreshMs ?? 15_000, maxStaleMs);
  if (minCloseDelay < closeMarginSeconds + Math.ceil(maxStaleMs / 1000)) {
    // Served channels could then reach their margin before the gate saw the close request (or, with a
    // margin at or above the delay, nothing would ever be served).
    throw new TollgateError(
      "InvalidRequest",
      `channel minCloseDelay (${minCloseDelay} s) must be at least closeMarginSeconds (${closeMarginSeconds} s) + maxStaleMs (${maxStaleMs} ms)`,
    );
  }
  const channels = createChannelCache({
    source: options.source,
    domain: { chainId: options.chainId, channels: options.channels },
    clock,
    refreshMs,
    maxStaleMs,
    unknownTtlMs: options.unknownTtlMs ?? 5_000,
    maxChannels: options.maxChannels ?? 100_000,
    onClosing: options.onClosing,
  });
  const v: VerifierContext = {
    store: options.store,
    clock,
    closeMarginSeconds,
    minCloseDelay,
    minDeposit: options.minDeposit ?? 0n,
    payTo: options.payTo.toLowerCase(),
    token: options.token.toLowerCase(),
    tag: options.tag.toLowerCase(),
    channels,
  };
  return {
    charge: (header, price, context) => chargeVoucher(v, header, price, context),
    async refund(charge) {
      await options.store.refund(charge.channelId, charge.price);
    },
    async channel(channelId) {
      return (await channels.lookup(channelId))?.state;
    },
  };
}
