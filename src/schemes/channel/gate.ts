/**
 * The gate part of the `channel` scheme (docs/channels.md): `{ type: "channel", amount | price }`
 * pricing entries become `channel` offers (the price per request and the terms a payer opens a channel
 * on); a request carrying `X-Tollgate-Channel` is checked and charged locally (`createChannelVerifier`)
 * and its voucher persisted before the handler runs; the forwarder hands the latest vouchers to the
 * facilitator, which claims them in batches.
 *
 * Settings come from `paymentGate({ schemeOptions: { channel: { contract, … } } })`
 * (`ChannelGateOptionsSchema`); the store defaults to a journal under `.tollgate/`.
 */
import type { Address, Hex } from "viem";
import { z } from "zod";
import { AmountSchema } from "../../gate/amount.ts";
import {
  atomicAmountOf,
  atomicPriceOf,
  PriceTextSchema,
  parseGateOptions,
} from "../../gate/paymentGateOptions.ts";
import { AddressSchema } from "../../protocol/address.ts";
import { MIN_CHANNEL_CLOSE_DELAY } from "../../protocol/channels.ts";
import { CHANNEL_VOUCHER_HEADER } from "../../protocol/channelVoucher.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import { chainIdOf, type Network } from "../../protocol/network.ts";
import type {
  GateScheme,
  GateSchemeContext,
  GateSchemePart,
  SchemeAcceptance,
  SchemePaymentBase,
  SchemeRequest,
  SchemeRoute,
} from "../types.ts";
import { CHANNEL_CLOSE_HEADER, CHANNEL_RECEIPT_HEADER } from "./channelHeaders.ts";
import { type ChannelStateSource, createFacilitatorChannelSource } from "./channelState.ts";
import { type CooperativeCloser, createCooperativeCloser, postChannelClose } from "./cooperativeClose.ts";
import { guardChannelSource } from "./gate/channelLookupGuard.ts";
import {
  type ChannelCharge,
  type ChannelRefusal,
  type ChannelVerifier,
  createChannelVerifier,
  DEFAULT_CHANNEL_MAX_STALE_MS,
} from "./gate/channelVerifier.ts";
import { createJournalVoucherStore } from "./gate/journalVoucherStore.ts";
import {
  createVoucherForwarder,
  postChannelVouchers,
  type VoucherForwarder,
} from "./gate/voucherForwarder.ts";
import type { VoucherStore } from "./gate/voucherStore.ts";

/** Where the journal lives unless configured. */
export const DEFAULT_CHANNEL_JOURNAL = ".tollgate/channel-vouchers.journal";

/** A `channel` offer: the price per request on a route. */
export type ChannelOffer = { scheme: "channel"; amount: bigint };

/** A request paid from a channel: what handlers see as the payment. */
export type ChannelPayment = SchemePaymentBase & {
  scheme: "channel";
  network: Network;
  channelId: Hex;
  /** The voucher's cumulative amount (what the seller may claim from the channel in all). */
  cumulativeAmount: bigint;
};

declare module "../types.ts" {
  interface SchemePayments {
    channel: ChannelPayment;
  }
}

/** `{ type: "channel", amount | price }`: pay per request from a prepaid channel. */
export const ChannelPricingSchema = z
  .strictObject({
    type: z.literal("channel"),
    amount: AmountSchema.optional(),
    price: PriceTextSchema.optional(),
  })
  .refine((e) => (e.amount === undefined) !== (e.price === undefined), {
    error: "give exactly one of `amount` (smallest units) and `price` (token text)",
  });

const isStore = (value: unknown): value is VoucherStore =>
  typeof value === "object" && value !== null && typeof (value as VoucherStore).charge === "function";
const isSource = (value: unknown): value is ChannelStateSource =>
  typeof value === "object" && value !== null && typeof (value as ChannelStateSource).get === "function";

/** `schemeOptions.channel` of `paymentGate`. */
export const ChannelGateOptionsSchema = z.object({
  /**
   * The `TollgateChannels` contract (default: the one the facilitator's `/supported` lists for the
   * gate's network, as `tollgate deploy` recorded it).
   */
  contract: AddressSchema.optional(),
  /** A voucher store (journal, PostgreSQL, Redis); default: a journal at `journal`. */
  store: z.custom<VoucherStore>(isStore).optional(),
  /** The journal path when no `store` is given (default `.tollgate/channel-vouchers.journal`). */
  journal: z.string().min(1).optional(),
  /** Where channels are read from (default: the facilitator's `GET /channels/:id`). */
  source: z.custom<ChannelStateSource>(isSource).optional(),
  /** Smallest deposit served, smallest unit (default and floor: the route's price). */
  minDeposit: AmountSchema.optional(),
  /** Deposit suggested to payers, in requests (default 1 000 × the price). */
  suggestedRequests: z.int().positive().max(1_000_000_000).optional(),
  /**
   * The shortest close delay accepted, seconds (default 3 600, never under TollgateChannels'
   * MIN_CLOSE_DELAY). At least `closeMarginSeconds` + 30 s: the gate must see a close request before
   * the margin begins.
   */
  minCloseDelay: z.int().nonnegative().optional(),
  /** Refuse a closing channel this long before its withdrawal opens, seconds (default 600). */
  closeMarginSeconds: z.int().nonnegative().optional(),
  /** Between forwards of vouchers to the facilitator, ms (default 5 000). */
  forwardIntervalMs: z.int().positive().optional(),
  /**
   * How fast channel ids this gate does not know are read (channelLookupGuard.ts): `burst` at once
   * (default 20), `perSecond` after (default 10), at most `queue` waiting (default 50; past it 429);
   * within that, each client address's share (`perClient`: 5 at once, 1 per second, 5 waiting;
   * `false` for none).
   */
  lookups: z
    .strictObject({
      burst: z.int().positive().max(1_000_000).optional(),
      perSecond: z.number().positive().max(1_000_000).optional(),
      queue: z.int().nonnegative().max(1_000_000).optional(),
      perClient: z
        .union([
          z.literal(false),
          z.strictObject({
            burst: z.int().positive().max(1_000_000).optional(),
            perSecond: z.number().positive().max(1_000_000).optional(),
            queue: z.int().nonnegative().max(1_000_000).optional(),
          }),
        ])
        .optional(),
    })
    .optional(),
});
export type ChannelGateOptions = z.input<typeof ChannelGateOptionsSchema>;

/** The close delay a gate offers and serves: the configured one, never under the contract's floor. */
const minCloseDelayOf = (o: z.infer<typeof ChannelGateOptionsSchema>): number =>
  Math.max(o.minCloseDelay ?? 3_600, MIN_CHANNEL_CLOSE_DELAY);

/** The smallest deposit configured (the offer raises it to the route's price). */
const minDepositOf = (o: z.infer<typeof ChannelGateOptionsSchema>): bigint =>
  o.minDeposit !== undefined ? atomicAmountOf(o.minDeposit, "schemeOptions.channel.minDeposit") : 0n;

export const channelGate: GateSchemePart<ChannelOffer> = {
  pricingTypes: ["channel"],
  create: createChannelGate,
  // Over MCP a voucher comes in `_meta["tollgate/channel"]` and its receipt goes back beside the result.
  mcp: {
    credentials: { [McpMetaKey.TollgateChannel]: CHANNEL_VOUCHER_HEADER },
    receipts: { [CHANNEL_RECEIPT_HEADER]: McpMetaKey.TollgateChannelReceipt },
  },
};

/** The channel gate part with its forwarder, for hosts and tests that drive it. */
export type ChannelGateScheme = GateScheme<ChannelOffer> & {
  /** Forwards pending vouchers now; resolves with how many the facilitator accepted. */
  forwardVouchers(): Promise<number>;
  /** The store, once opened. */
  store(): Promise<VoucherStore>;
};

type ChannelGateSettings = z.infer<typeof ChannelGateOptionsSchema>;

/**
 * One channel gate's state. Built for every gate, used by few: settings are read, and the store opened,
 * only once a route sells by channel (a gate without channel pricing never touches the journal). Each
 * lazy part is read once; a failed contract or tag lookup is retried on the next ask.
 */
type ChannelGateState = {
  context: GateSchemeContext;
  apiKey: unknown;
  settings?: ChannelGateSettings | undefined;
  contractLookup?: Promise<Address> | undefined;
  storeReady?: Promise<VoucherStore> | undefined;
  tagReady?: Promise<Hex> | undefined;
  forwarder?: VoucherForwarder | undefined;
  verifier?: ChannelVerifier | undefined;
  closer?: CooperativeCloser | undefined;
};

/** `schemeOptions.channel`, parsed and checked once. */
function settingsOf(g: ChannelGateState): ChannelGateSettings {
  if (g.settings !== undefined) return g.settings;
  const parsed = parseGateOptions(
    ChannelGateOptionsSchema,
    g.context.options.schemeOptions?.channel ?? {},
    "paymentGate options: schemeOptions.channel",
  );
  const margin = parsed.closeMarginSeconds ?? 600;
  if (minCloseDelayOf(parsed) < margin + DEFAULT_CHANNEL_MAX_STALE_MS / 1000) {
    throw new TollgateError(
      "InvalidRequest",
      `paymentGate options: schemeOptions.channel.minCloseDelay must be at least closeMarginSeconds + ${DEFAULT_CHANNEL_MAX_STALE_MS / 1000} s (the time to see a close request)`,
    );
  }
  g.settings = parsed;
  return g.settings;
}

/** The configured contract, or the facilitator's for the gate's network (read once; a failure is retried). */
function channelsContractOf(g: ChannelGateState): Promise<Address> {
  const configured = settingsOf(g).contract;
  if (configured !== undefined) return Promise.resolve(configured as Address);
  if (g.contractLookup === undefined) {
    const { context } = g;
    g.contractLookup = context.facilitator.supported().then((supported) => {
      const listed = supported.networks.find((n) => n.network === context.network)?.channels;
      if (listed === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          `paymentGate options: the facilitator lists no TollgateChannels contract for ${context.network}; set schemeOptions.channel.contract`,
          { details: { network: context.network } },
        );
      }
      return listed as Address;
    });
    g.contractLookup.catch(() => {
      g.contractLookup = undefined;
    });
  }
  return g.contractLookup;
}

/** The configured store, or the journal opened once. */
function openStoreOf(g: ChannelGateState): Promise<VoucherStore> {
  if (g.storeReady === undefined) {
    const o = settingsOf(g);
    g.storeReady =
      o.store !== undefined
        ? Promise.resolve(o.store)
        : createJournalVoucherStore({ path: o.journal ?? DEFAULT_CHANNEL_JOURNAL });
    // An unopenable journal fails paid requests (5xx), not the process.
    g.storeReady.catch((error: unknown) =>
      g.context.logger?.error({ err: error }, "channel voucher store did not open"),
    );
  }
  return g.storeReady;
}

/** The store's tag, read once: the 402 offers it and the verifier serves only channels carrying it. */
function storeTagOf(g: ChannelGateState): Promise<Hex> {
  if (g.tagReady === undefined) {
    g.tagReady = openStoreOf(g).then((store) => store.tag());
    g.tagReady.catch(() => {
      g.tagReady = undefined;
    });
  }
  return g.tagReady;
}

/** Starts forwarding the store's vouchers to the facilitator, when the gate has a provider key. */
function startForwarder(g: ChannelGateState, store: VoucherStore, o: ChannelGateSettings): void {
  const { context, apiKey } = g;
  if (typeof apiKey === "string") {
    g.forwarder = createVoucherForwarder({
      store,
      send: postChannelVouchers(context.facilitator, apiKey),
      intervalMs: o.forwardIntervalMs,
      logger: context.logger,
    });
    g.forwarder.start();
    // Vouchers recovered from the store (a restart after a crash) go to the facilitator at once.
    g.forwarder.flush().catch((error: unknown) => context.logger?.warn({ err: error }, "forwarding failed"));
  } else {
    context.logger?.warn({}, "channel vouchers are kept but not forwarded: the gate has no providerApiKey");
  }
}

/** The store opened, the forwarder started, the closer and the verifier built: once. */
async function readyOf(g: ChannelGateState): Promise<ChannelVerifier> {
  if (g.verifier !== undefined) return g.verifier;
  const store = await openStoreOf(g);
  const tag = await storeTagOf(g);
  const channels = await channelsContractOf(g);
  if (g.verifier !== undefined) return g.verifier;
  const { context, apiKey } = g;
  const o = settingsOf(g);
  startForwarder(g, store, o);
  // Ids new to this gate are remembered and rate-limited before any read, so made-up ids cannot spend
  // the reads a payer's new channel needs; the reads carry the provider key, whose allowance at the
  // facilitator is the gate's own.
  const source = guardChannelSource(
    o.source ??
      createFacilitatorChannelSource(context.facilitator, typeof apiKey === "string" ? apiKey : undefined),
    { payTo: context.payTo, token: context.token, clock: context.clock, ...o.lookups },
  );
  const pending = g.forwarder;
  g.closer = createCooperativeCloser({
    payTo: context.payTo,
    token: context.token,
    tag,
    source,
    store,
    forward: () => (pending === undefined ? Promise.resolve(0) : pending.flush()),
    closeAtFacilitator:
      typeof apiKey === "string" ? postChannelClose(context.facilitator, apiKey) : undefined,
    logger: context.logger,
  });
  g.verifier = createChannelVerifier({
    chainId: chainIdOf(context.network),
    channels,
    payTo: context.payTo,
    token: context.token,
    source,
    store,
    tag,
    clock: context.clock,
    closeMarginSeconds: o.closeMarginSeconds,
    minCloseDelay: minCloseDelayOf(o),
    minDeposit: minDepositOf(o),
    onClosing: () => {
      g.forwarder
        ?.flush()
        .catch((error: unknown) => context.logger?.warn({ err: error }, "forwarding failed"));
    },
  });
  return g.verifier;
}

const receiptOf = (channelId: string, highest: bigint, spent: bigint) => `${channelId}.${highest}.${spent}`;

/** A `channel` pricing entry as an offer; a gate that sells by channel opens its store now. */
function compileEntry(g: ChannelGateState, entry: unknown, where: string): ChannelOffer {
  settingsOf(g);
  // Recovered vouchers are forwarded on start.
  readyOf(g).catch((error: unknown) =>
    g.context.logger?.error({ err: error }, "channel scheme did not start"),
  );
  const parsed = parseGateOptions(ChannelPricingSchema, entry, `paymentGate options: ${where}`);
  const amount =
    parsed.amount !== undefined
      ? atomicAmountOf(parsed.amount, `${where}.amount`)
      : atomicPriceOf(parsed.price as string, g.context.decimals, `${where}.price`);
  return { scheme: "channel", amount };
}

/** The 402's `channel` option: the price and the terms a payer opens a channel on. */
async function offerOf(g: ChannelGateState, offer: ChannelOffer) {
  const o = settingsOf(g);
  // A fault of the store (its tag unreadable) is a fault of the 402, not an offer without a tag: a
  // payer must never open a channel no gate of this store would serve.
  const tag = await storeTagOf(g);
  const contract = await channelsContractOf(g);
  const minDeposit = minDepositOf(o);
  return {
    scheme: "channel" as const,
    amount: offer.amount,
    extra: {
      contract,
      facilitator: g.context.facilitator.url,
      minDeposit: (minDeposit > offer.amount ? minDeposit : offer.amount).toString(),
      suggestedDeposit: (offer.amount * BigInt(o.suggestedRequests ?? 1_000)).toString(),
      minCloseDelay: minCloseDelayOf(o),
      tag,
    },
  };
}

/** A refused voucher; the receipt header tells the payer the channel's tally when the store gave one. */
function refusalOf(header: string, result: ChannelRefusal): SchemeAcceptance {
  const details = result.details;
  const channelId = header.trim().slice(0, 66);
  return {
    kind: "refuse",
    error: result.error,
    message: result.message,
    decorate:
      details?.highest === undefined
        ? undefined
        : (response) =>
            response.headers.set(
              CHANNEL_RECEIPT_HEADER,
              receiptOf(channelId, BigInt(details.highest ?? "0"), BigInt(details.spent ?? "0")),
            ),
  };
}

/** A charged request passes with its receipt; a 5xx answer gives the charge back (once). */
function passOf(
  g: ChannelGateState,
  v: ChannelVerifier,
  charge: ChannelCharge,
  price: bigint,
): SchemeAcceptance {
  const { context } = g;
  const headers = new Headers();
  headers.set(CHANNEL_RECEIPT_HEADER, receiptOf(charge.channelId, charge.tally.highest, charge.tally.spent));
  let reported = false;
  return {
    kind: "pass",
    paid: {
      scheme: "channel",
      payer: charge.payer,
      amount: price,
      payTo: context.payTo,
      network: context.network,
      token: context.token,
      channelId: charge.channelId,
      cumulativeAmount: charge.cumulativeAmount,
    },
    headers,
    async complete(status) {
      if (reported || !(status >= 500)) return;
      reported = true;
      try {
        await v.refund(charge);
      } catch (error) {
        context.logger?.warn({ err: error, channelId: charge.channelId }, "channel charge not refunded");
      }
    },
  };
}

/** A request carrying a voucher (charged locally) or a cooperative close (answered here). */
async function acceptOf(
  g: ChannelGateState,
  header: string,
  request: SchemeRequest,
  route: SchemeRoute<ChannelOffer>,
): Promise<SchemeAcceptance> {
  if (request.headers.get(CHANNEL_VOUCHER_HEADER) === null) {
    // A payer's cooperative close (cooperativeClose.ts): answered here, the handler never runs.
    await readyOf(g);
    return { kind: "respond", response: await (g.closer as CooperativeCloser).close(header, request) };
  }
  let price: bigint | undefined;
  for (const offer of route.offers) if (price === undefined || offer.amount < price) price = offer.amount;
  if (price === undefined) {
    return { kind: "refuse", error: "ChannelVoucherInvalid", message: "this route is not sold by channel" };
  }
  const v = await readyOf(g);
  // The request itself: its client is worked out only if the guard reads it (an id new to the gate).
  const result = await v.charge(header, price, request);
  if (!result.ok) {
    g.context.logger?.debug(
      { method: request.method, path: request.path, reason: result.message },
      "voucher refused",
    );
    return refusalOf(header, result);
  }
  return passOf(g, v, result, price);
}

function createChannelGate(context: GateSchemeContext): ChannelGateScheme {
  const g: ChannelGateState = {
    context,
    apiKey: (context.options as { providerApiKey?: unknown }).providerApiKey,
  };
  return {
    compile: (entry, where) => compileEntry(g, entry, where),
    offer: (offer) => offerOf(g, offer),
    credential: (request) =>
      request.headers.get(CHANNEL_VOUCHER_HEADER) ?? request.headers.get(CHANNEL_CLOSE_HEADER),
    accept: (header, request, route) => acceptOf(g, header, request, route),
    async forwardVouchers() {
      await readyOf(g);
      return g.forwarder === undefined ? 0 : g.forwarder.flush();
    },
    store: () => openStoreOf(g),
    async close() {
      await g.forwarder?.stop();
      if (g.storeReady !== undefined && g.settings?.store === undefined) {
        await (await g.storeReady.catch(() => undefined))?.close();
      }
    },
  };
}
