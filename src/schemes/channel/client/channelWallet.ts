/**
 * The payer's side of the `channel` scheme: open channels through the facilitator (gasless, one wallet
 * signature), sign a voucher per paid request with the channel's session key, keep the state in a
 * `ChannelWalletStore`, and open the next channel before the current one runs dry so a paid request
 * never waits for a block after the first.
 *
 * Invariants:
 * - The cumulative amount of a channel's vouchers never goes down, also across restarts with a
 *   persistent store: a voucher is written to the store before it is handed out.
 * - A voucher signs `max(signed, owed + price)`: the payer's running total of what its requests were
 *   charged. A request the gate answered 5xx (refunded) or refused takes its price off `owed`, so the
 *   credit it left pays the next request instead of being signed again. The gate never holds a voucher
 *   above `signed`, so whatever a gate says, a payer never pays more than it signed.
 * - A channel's deposit is taken from the wallet only through `approveDeposit`, and a top-up only
 *   through `approveTopUp` (the budget's hooks), each before its authorization leaves the process.
 * - A channel running low is topped up (relayed, gasless) rather than replaced, sized like a new one;
 *   payments keep using its remainder meanwhile, so steady state never waits for a block.
 * - A channel is opened for one gate's tag (its salt starts with the tag the 402 offered) and pays only
 *   terms with that tag: channels are kept per (contract, payee, token, tag).
 * - No channel is opened whose close delay is above `maxCloseDelay`: a seller cannot lock the deposit
 *   longer than the payer's bound should it vanish.
 */
import { randomBytes } from "node:crypto";
import type { Address, Hex } from "viem";
import { signChannelCloseRequest } from "../../../chain/actions/channels/signChannelCloseRequest.ts";
import { signChannelOpen } from "../../../chain/actions/channels/signChannelOpen.ts";
import { signChannelTopUp } from "../../../chain/actions/channels/signChannelTopUp.ts";
import type { TokenDomain } from "../../../chain/signers/eip712Types.ts";
import type { TypedDataSigner } from "../../../chain/signers/typedDataSigner.ts";
import {
  createFacilitatorClient,
  type FacilitatorClient,
  type FetchFn,
} from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import {
  type ChannelCloseRequestResponse,
  ChannelCloseRequestResponseSchema,
  type ChannelCloseResponse,
  ChannelCloseResponseSchema,
  ChannelOpenResponseSchema,
  ChannelStateSchema,
  ChannelTopUpResponseSchema,
  type ChannelWithdrawResponse,
  ChannelWithdrawResponseSchema,
} from "../../../protocol/channels.ts";
import { type Clock, systemClock, unixSeconds } from "../../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import { chainIdOf, type Network } from "../../../protocol/network.ts";
import { CHANNEL_CLOSE_HEADER } from "../channelHeaders.ts";
import type { ChannelRecord, ChannelWalletStore } from "./channelWalletStore.ts";
import { createMemoryChannelWalletStore } from "./channelWalletStore.ts";
import {
  createSessionKey,
  createVoucherSigner,
  exportSessionKey,
  importSessionKeyPrivate,
  type VoucherSigner,
} from "./sessionKey.ts";

/** What a payer needs of a gate's `channel` offer. */
export type ChannelTermsInput = {
  network: Network;
  contract: Address;
  facilitator: string;
  payee: Address;
  token: Address;
  /** Price of one request. */
  price: bigint;
  minDeposit: bigint;
  minCloseDelay: number;
  /** The tag of the gate's voucher store: the channel's salt starts with it (absent from older gates). */
  tag?: Hex | undefined;
};

/** The longest close delay a payer accepts unless configured: one day. */
export const DEFAULT_MAX_CHANNEL_CLOSE_DELAY = 86_400;

/**
 * `OfferMismatch` when a gate's minimum close delay is above the payer's bound: the payer's deposit would
 * be locked longer than it accepts after a close request, should the seller vanish. `undefined` when it
 * is within.
 */
export function closeDelayRefusal(
  terms: Pick<ChannelTermsInput, "minCloseDelay" | "payee">,
  maxCloseDelay: number,
  tool?: string,
): TollgateError | undefined {
  if (terms.minCloseDelay <= maxCloseDelay) return undefined;
  return new TollgateError(
    "OfferMismatch",
    `${tool === undefined ? "" : `${tool}: `}the seller's gate asks a channel close delay of at least ${terms.minCloseDelay} s, above the payer's bound of ${maxCloseDelay} s; refused before opening a channel`,
    {
      details: {
        ...(tool === undefined ? {} : { tool }),
        field: "closeDelay",
        payee: terms.payee,
        asked: String(terms.minCloseDelay),
        bound: String(maxCloseDelay),
      },
    },
  );
}

export type ChannelWalletOptions = {
  account: TypedDataSigner;
  network: Network;
  facilitator: FacilitatorClient;
  store?: ChannelWalletStore | undefined;
  clock?: Clock | undefined;
  random?: ((bytes: number) => Uint8Array) | undefined;
  /**
   * Requests a channel's deposit is sized for when the caller names none (default 1 000); a function
   * is asked per open (a policy sizing deposits from its forecast and budget).
   */
  calls?: number | ((terms: ChannelTermsInput) => number | undefined) | undefined;
  /** The largest deposit one channel may take (default: no cap beyond `approveDeposit`). */
  maxDeposit?: bigint | undefined;
  /** Close delay asked for, seconds (default 3 600, raised to the gate's minimum). */
  closeDelay?: number | undefined;
  /**
   * The longest close delay the payer accepts, seconds (default one day): a gate whose minimum is above
   * it is refused (`OfferMismatch`, `details.field` "closeDelay") before anything is signed.
   */
  maxCloseDelay?: number | undefined;
  /** Open the next channel when less than this share of the deposit is left (default 0.25). */
  renewBelow?: number | undefined;
  /**
   * Asked before a deposit leaves the wallet (a budget holds it here, under the channel's id); throw to
   * refuse. Called after the open is signed locally and before anything is stored or sent.
   */
  approveDeposit?: ((amount: bigint, terms: ChannelTermsInput, channelId: Hex) => Promise<void>) | undefined;
  /**
   * Asked before a top-up leaves the wallet (a budget grows the channel's hold); throw to refuse (the
   * wallet then opens the next channel instead, through `approveDeposit`).
   */
  approveTopUp?: ((amount: bigint, terms: ChannelTermsInput, channelId: Hex) => Promise<void>) | undefined;
  /**
   * Top a channel running low up through the facilitator (default true); `false` opens the next channel
   * instead, as does a facilitator without the top-up route.
   */
  topUp?: boolean | undefined;
  /** The token's EIP-712 domain name and version (default: the facilitator's `GET /supported`). */
  tokenDomain?: ((token: Address) => Promise<{ name: string; version: string }>) | undefined;
  /**
   * Reaches sellers' gates for cooperative closes (`requestClose`). Without it a close waits for the
   * close delay unless the seller closes on its own.
   */
  fetch?: FetchFn | undefined;
};

/** A close request's answer, with the seller's cooperative close when its gate took part. */
export type ChannelCloseOutcome = ChannelCloseRequestResponse & {
  /** The seller's gate closed cooperatively (`closed`: the rest is back in the wallet) or is closing. */
  cooperative?: ChannelCloseResponse | undefined;
  /** Why the seller's gate did not close it cooperatively (the rest then comes back after the delay). */
  cooperativeError?: string | undefined;
};

/** A payment on a channel: the header to send and what to book once the answer is in. */
export type ChannelVoucherPayment = {
  channelId: Hex;
  header: string;
  cumulativeAmount: bigint;
  price: bigint;
};

export type ChannelWallet = {
  /**
   * Signs a voucher for one request at `terms.price`, opening a channel first when none has room
   * (`calls` sizes its deposit). Waits for a block only when it opens a channel.
   */
  pay(terms: ChannelTermsInput, options?: { calls?: number | undefined }): Promise<ChannelVoucherPayment>;
  /** A voucher from an open channel with room, or `undefined` — never opens, never waits. */
  payNow(terms: ChannelTermsInput): ChannelVoucherPayment | undefined;
  /**
   * Books the answer to a paid request: a refused or failed request gives its price back as credit;
   * `receipt` (the gate's `X-Tollgate-Channel-Receipt`) realigns what the payer thinks it owes.
   */
  settle(payment: ChannelVoucherPayment, status: number, receipt: string | null): void;
  /** The payer's channels as stored. */
  channels(): ChannelRecord[];
  /** Remembers that `method url` is sold by channel on `terms` (from its 402), to pay it up front. */
  learnRoute(method: string, url: string, terms: ChannelTermsInput): void;
  /** The terms `method url` was last sold on, if known. */
  routeTerms(method: string, url: string): ChannelTermsInput | undefined;
  /**
   * Asks to close a channel (relayed, gasless), then asks the seller's gate to close it cooperatively
   * (`cooperative: false` skips that): the seller's last voucher is claimed and the rest returned in one
   * transaction, at once. Without the gate's help the payer withdraws the rest after the close delay.
   */
  requestClose(
    channelId: Hex,
    closeOptions?: { cooperative?: boolean | undefined },
  ): Promise<ChannelCloseOutcome>;
  /** Re-reads a channel from the facilitator (deposit, claimed, close state) into the store. */
  refresh(channelId: Hex): Promise<ChannelRecord | undefined>;
  /**
   * Adds `amount` to an open channel's deposit: one wallet signature, relayed gasless by the facilitator
   * (`POST /channels/:id/top-up`); `approveTopUp` is asked first.
   */
  topUp(channelId: Hex, amount: bigint): Promise<ChannelRecord>;
  /**
   * Takes back what the seller did not claim once the close delay after `requestClose` is over — alone,
   * when the seller vanished (relayed gasless: `POST /channels/:id/withdraw`; anyone may send
   * `withdrawChannel` on chain too). Refused with `InvalidRequest` and `retryAfter` before the delay.
   */
  withdraw(channelId: Hex): Promise<ChannelWithdrawResponse>;
  /** When a channel last signed a voucher in this process (ms; its load or open time before that). */
  lastUsed(channelId: Hex): number | undefined;
};

/** The larger of two amounts (`Math.max` takes no bigint). */
function maxOf(a: bigint, b: bigint): bigint {
  if (a > b) return a;
  return b;
}

const keyOf = (t: { contract: string; payee: string; token: string; tag?: string | undefined }) =>
  `${t.contract}|${t.payee}|${t.token}|${t.tag ?? ""}`.toLowerCase();

type Live = { record: ChannelRecord; signer: VoucherSigner };

/**
 * @example
 * const wallet = createChannelWallet({ account, network: "eip155:8453", facilitator,
 *   store: await createFileChannelWalletStore({ path: ".tollgate/channels.journal" }) });
 * const { header } = await wallet.pay(terms, { calls: 500 });
 */
export function createChannelWallet(options: ChannelWalletOptions): ChannelWallet {
  const store = options.store ?? createMemoryChannelWalletStore();
  const clock = options.clock ?? systemClock;
  const random = options.random ?? ((n: number) => new Uint8Array(randomBytes(n)));
  const chainId = chainIdOf(options.network);
  const renewBelow = options.renewBelow ?? 0.25;
  const live = new Map<string, Live>();
  const byTerms = new Map<string, Live[]>();
  const opening = new Map<string, Promise<Live>>();
  /** Top-ups in flight, per channel. */
  const toppingUp = new Map<string, Promise<void>>();
  /** The last amount a channel was funded with (open or top-up): the size its renewal repeats. */
  const funded = new Map<string, bigint>();
  const usedAt = new Map<string, number>();
  /** Known routes (`METHOD origin/path`, no query) → the channel terms their 402 offered; bounded. */
  const routes = new Map<string, ChannelTermsInput>();
  /** Terms → a route sold on them (the gate a cooperative close is asked of); bounded like `routes`. */
  const routeOfTerms = new Map<string, { method: string; url: string }>();
  const routeKey = (method: string, url: string) => {
    const q = url.indexOf("?");
    return `${method.toUpperCase()} ${q < 0 ? url : url.slice(0, q)}`;
  };

  const track = (record: ChannelRecord): Live => {
    const entry: Live = {
      record,
      signer: createVoucherSigner(
        importSessionKeyPrivate(record.sessionKey),
        { chainId, channels: record.contract },
        record.channelId,
      ),
    };
    live.set(record.channelId, entry);
    usedAt.set(record.channelId, clock.now());
    const k = keyOf(record);
    const list = byTerms.get(k) ?? [];
    list.push(entry);
    byTerms.set(k, list);
    return entry;
  };
  for (const record of store.load()) {
    if (record.network === options.network && record.status !== "closed") track(record);
  }

  const put = (entry: Live, changes: Partial<ChannelRecord>) => {
    entry.record = { ...entry.record, ...changes };
    store.put(entry.record);
  };

  let supported: Promise<Awaited<ReturnType<FacilitatorClient["supported"]>>> | undefined;
  const tokenDomainOf = async (token: Address): Promise<TokenDomain> => {
    let named: { name: string; version: string } | undefined;
    if (options.tokenDomain !== undefined) named = await options.tokenDomain(token);
    else {
      supported ??= options.facilitator.supported().catch((error: unknown) => {
        supported = undefined;
        throw error;
      });
      named = (await supported).networks
        .find((n) => n.network === options.network)
        ?.tokens.find((t) => sameAddress(t.address, token))?.eip712;
    }
    if (named === undefined) {
      throw new TollgateError(
        "UnsupportedToken",
        "the facilitator does not settle this token on this network",
        {
          details: { token, network: options.network },
        },
      );
    }
    return { name: named.name, version: named.version, chainId, verifyingContract: token };
  };

  /** Room left on a channel for new vouchers. */
  const room = (r: ChannelRecord) => r.deposit - maxOf(r.signed, r.owed);
  const nextAmount = (r: ChannelRecord, price: bigint) => maxOf(r.signed, r.owed + price);

  const usable = (terms: ChannelTermsInput): Live | undefined => {
    for (const entry of byTerms.get(keyOf(terms)) ?? []) {
      const r = entry.record;
      if (r.status === "open" && nextAmount(r, terms.price) <= r.deposit) return entry;
    }
    return undefined;
  };

  const depositFor = (terms: ChannelTermsInput, calls: number | undefined): bigint => {
    const wanted = calls ?? (typeof options.calls === "function" ? options.calls(terms) : options.calls);
    const n = BigInt(Math.max(1, Math.floor(wanted ?? 1_000)));
    let deposit = terms.price * n;
    if (deposit < terms.minDeposit) deposit = terms.minDeposit;
    if (options.maxDeposit !== undefined && deposit > options.maxDeposit) {
      if (options.maxDeposit < terms.minDeposit || options.maxDeposit < terms.price) {
        throw new TollgateError(
          "BudgetExceeded",
          "the gate's minimum channel deposit is above the payer's cap",
          {
            details: { minDeposit: terms.minDeposit.toString(), maxDeposit: options.maxDeposit.toString() },
          },
        );
      }
      deposit = options.maxDeposit;
    }
    return deposit;
  };

  const open = async (terms: ChannelTermsInput, calls: number | undefined): Promise<Live> => {
    if (terms.network !== options.network) {
      throw new TollgateError("UnsupportedNetwork", "the channel is on another network than the payer");
    }
    const refusal = closeDelayRefusal(terms, options.maxCloseDelay ?? DEFAULT_MAX_CHANNEL_CLOSE_DELAY);
    if (refusal !== undefined) throw refusal;
    const amount = depositFor(terms, calls);
    const key = createSessionKey();
    // The gate's tag first (the contract keeps the salt's first 8 bytes): only that gate's store serves it.
    const tag = terms.tag?.toLowerCase() as Hex | undefined;
    const salt =
      `0x${tag === undefined ? "" : tag.slice(2)}${Buffer.from(random(tag === undefined ? 32 : 24)).toString("hex")}` as Hex;
    const closeDelay = Math.max(options.closeDelay ?? 3_600, terms.minCloseDelay);
    const now = unixSeconds(clock);
    const validBefore = BigInt(now + 600);
    const signed = await signChannelOpen(options.account, {
      chainId,
      channels: terms.contract,
      tokenDomain: await tokenDomainOf(terms.token),
      payee: terms.payee,
      amount,
      sessionKeyX: key.x,
      sessionKeyY: key.y,
      closeDelay: BigInt(closeDelay),
      salt,
      validAfter: 0n,
      validBefore,
    });
    await options.approveDeposit?.(amount, terms, signed.channelId.toLowerCase() as Hex);
    // The key is stored before the open leaves: a payer that dies now still holds the channel's key.
    const record: ChannelRecord = {
      channelId: signed.channelId.toLowerCase() as Hex,
      network: options.network,
      contract: terms.contract,
      facilitator: terms.facilitator,
      payer: options.account.address,
      payee: terms.payee,
      token: terms.token,
      deposit: amount,
      signed: 0n,
      owed: 0n,
      closeDelay,
      salt,
      ...(tag === undefined ? {} : { tag }),
      sessionKey: exportSessionKey(key),
      status: "opening",
      openValidBefore: Number(validBefore),
      ...(routeOfTerms.has(keyOf(terms)) ? { closeRoute: routeOfTerms.get(keyOf(terms)) } : {}),
    };
    store.put(record);
    const entry = track(record);
    try {
      const reply = await options.facilitator.request("POST", "/channels", ChannelOpenResponseSchema, {
        body: {
          network: options.network,
          contract: terms.contract,
          token: terms.token,
          payer: options.account.address,
          payee: terms.payee,
          amount: amount.toString(),
          sessionKeyX: key.x,
          sessionKeyY: key.y,
          closeDelay,
          salt,
          validAfter: "0",
          validBefore: validBefore.toString(),
          signature: signed.signature,
        },
      });
      if (reply.channelId.toLowerCase() !== record.channelId) {
        throw new TollgateError(
          "InvalidRequest",
          "the facilitator opened another channel than the one signed",
        );
      }
      put(entry, { status: "open", deposit: BigInt(reply.channel.deposit) });
      funded.set(record.channelId, amount);
      return entry;
    } catch (error) {
      // Refused for good (bad terms, funds): the authorization never moved money. A fault may have
      // opened it anyway: `refresh` finds out, and the record keeps the key meanwhile.
      if (isTollgateError(error) && error.status < 500 && error.code !== "RateLimited")
        put(entry, { status: "closed" });
      throw error;
    }
  };

  const openOnce = (terms: ChannelTermsInput, calls: number | undefined): Promise<Live> => {
    const k = keyOf(terms);
    let pending = opening.get(k);
    if (pending === undefined) {
      pending = open(terms, calls).finally(() => opening.delete(k));
      opening.set(k, pending);
    }
    return pending;
  };

  const sign = (entry: Live, price: bigint): ChannelVoucherPayment => {
    const r = entry.record;
    const cumulativeAmount = nextAmount(r, price);
    const owed = r.owed + price;
    // Durable before the voucher leaves: a restart never signs lower than this.
    store.progress(r.channelId, cumulativeAmount, owed);
    entry.record = { ...r, signed: cumulativeAmount, owed };
    usedAt.set(r.channelId, clock.now());
    return { channelId: r.channelId, header: entry.signer.header(cumulativeAmount), cumulativeAmount, price };
  };

  /** The terms a route on this channel's contract, payee and token was last sold on, if any is known. */
  const knownTerms = (r: ChannelRecord): ChannelTermsInput | undefined => {
    const k = keyOf(r);
    for (const t of routes.values()) if (keyOf(t) === k) return t;
    return undefined;
  };

  const topUp = async (entry: Live, terms: ChannelTermsInput | undefined, amount: bigint) => {
    const r = entry.record;
    if (r.status !== "open") throw new TollgateError("ChannelClosing", "the channel is not open");
    // The gate's minimum deposit bounds a top-up as it bounds an open (the facilitator refuses less, after
    // the budget would already have grown the hold): refused here, before anything is signed or held.
    const minimum = (terms ?? knownTerms(r))?.minDeposit ?? 0n;
    if (amount < minimum || amount <= 0n) {
      throw new TollgateError("AmountMismatch", `a top-up of this channel must be at least ${minimum}`, {
        details: { reason: "top_up_below_minimum", amount: amount.toString(), minimum: minimum.toString() },
      });
    }
    const t: ChannelTermsInput = terms ?? {
      network: r.network,
      contract: r.contract,
      facilitator: r.facilitator,
      payee: r.payee,
      token: r.token,
      price: 0n,
      minDeposit: 0n,
      minCloseDelay: r.closeDelay,
      tag: r.tag,
    };
    const salt = `0x${Buffer.from(random(32)).toString("hex")}` as Hex;
    const validBefore = BigInt(unixSeconds(clock) + 600);
    const signed = await signChannelTopUp(options.account, {
      chainId,
      channels: r.contract,
      tokenDomain: await tokenDomainOf(r.token),
      channelId: r.channelId,
      amount,
      salt,
      validAfter: 0n,
      validBefore,
    });
    await options.approveTopUp?.(amount, t, r.channelId);
    const reply = await options.facilitator.request(
      "POST",
      `/channels/${r.channelId}/top-up`,
      ChannelTopUpResponseSchema,
      {
        body: {
          amount: amount.toString(),
          salt,
          validAfter: "0",
          validBefore: validBefore.toString(),
          signature: signed.signature,
        },
      },
    );
    const deposit = BigInt(reply.channel.deposit);
    if (deposit > entry.record.deposit) put(entry, { deposit });
    funded.set(r.channelId, amount);
  };

  /** Tops this channel up (or opens the next one) in the background once it is running low. */
  const renewIfLow = (entry: Live, terms: ChannelTermsInput) => {
    const r = entry.record;
    const size = funded.get(r.channelId) ?? r.deposit;
    if (Number(room(r)) >= Number(size) * renewBelow && room(r) >= terms.price * 2n) return;
    if (opening.has(keyOf(terms)) || toppingUp.has(r.channelId)) return;
    const others = (byTerms.get(keyOf(terms)) ?? []).filter(
      (e) => e !== entry && e.record.status === "open" && room(e.record) > room(r),
    );
    if (others.length > 0) return;
    // Sized by the payer's policy (its forecast) when it has one, else like the last funding.
    const planned = typeof options.calls === "function" ? options.calls(terms) : undefined;
    const calls = planned ?? Number(size / terms.price);
    const renewByOpen = () => {
      openOnce(terms, calls).catch(() => {});
    };
    if (options.topUp === false || r.status !== "open") {
      renewByOpen();
      return;
    }
    let amount: bigint;
    try {
      amount = depositFor(terms, calls);
    } catch {
      return;
    }
    const pending = topUp(entry, terms, amount)
      .catch(() => {
        // Refused by the budget, the facilitator (or one without the route), or the channel is closing:
        // the next channel is opened instead, as before top-ups.
        renewByOpen();
      })
      .finally(() => toppingUp.delete(r.channelId));
    toppingUp.set(r.channelId, pending);
  };

  /** A top-up in flight for a channel on these terms (to wait for instead of opening another). */
  const pendingTopUp = (terms: ChannelTermsInput): Promise<void> | undefined => {
    for (const e of byTerms.get(keyOf(terms)) ?? []) {
      const pending = toppingUp.get(e.record.channelId);
      if (pending !== undefined) return pending;
    }
    return undefined;
  };

  return {
    async pay(terms, payOptions = {}) {
      if (usable(terms) === undefined) {
        // Ran dry while its top-up is on its way: wait for it rather than open another channel.
        const pending = pendingTopUp(terms);
        if (pending !== undefined) await pending;
      }
      const entry =
        usable(terms) ?? (await opening.get(keyOf(terms))) ?? (await openOnce(terms, payOptions.calls));
      if (nextAmount(entry.record, terms.price) > entry.record.deposit) {
        // Opened concurrently by another caller and already used up: open another.
        return this.pay(terms, payOptions);
      }
      const payment = sign(entry, terms.price);
      renewIfLow(entry, terms);
      return payment;
    },
    payNow(terms) {
      const entry = usable(terms);
      if (entry === undefined) return undefined;
      const payment = sign(entry, terms.price);
      renewIfLow(entry, terms);
      return payment;
    },
    settle(payment, status, receipt) {
      const entry = live.get(payment.channelId);
      if (entry === undefined) return;
      const r = entry.record;
      let owed = r.owed;
      if (status >= 500 || status === 402) owed = owed >= payment.price ? owed - payment.price : 0n;
      if (receipt !== null && status === 402) {
        // The gate's tally after refusing: `spent` is what it charged this channel so far. Never above
        // what was signed (the gate holds nothing higher), so taking it can only move `owed` up to it.
        const parts = receipt.split(".");
        if (parts.length === 3 && parts[0] === r.channelId && /^(0|[1-9][0-9]{0,77})$/.test(parts[2] ?? "")) {
          const spent = BigInt(parts[2]!);
          if (spent > owed) owed = spent > r.signed ? r.signed : spent;
        }
      }
      if (owed !== r.owed) {
        store.progress(r.channelId, r.signed, owed);
        entry.record = { ...r, owed };
      }
    },
    channels: () => [...live.values()].map((e) => e.record),
    learnRoute(method, url, terms) {
      if (routes.size >= 10_000) routes.clear();
      routes.set(routeKey(method, url), terms);
      const k = keyOf(terms);
      if (!routeOfTerms.has(k)) {
        if (routeOfTerms.size >= 10_000) routeOfTerms.clear();
        const q = url.indexOf("?");
        const route = { method: method.toUpperCase(), url: q < 0 ? url : url.slice(0, q) };
        routeOfTerms.set(k, route);
        for (const entry of byTerms.get(k) ?? []) {
          if (entry.record.closeRoute === undefined && entry.record.status !== "closed") {
            put(entry, { closeRoute: route });
          }
        }
      }
    },
    routeTerms: (method, url) => routes.get(routeKey(method, url)),
    async requestClose(channelId, closeOptions = {}) {
      const entry = live.get(channelId);
      if (entry === undefined) throw new TollgateError("NotFound", "no such channel in this wallet");
      const deadline = BigInt(unixSeconds(clock) + 600);
      const signature = await signChannelCloseRequest(options.account, {
        chainId,
        channels: entry.record.contract,
        channelId,
        deadline,
      });
      const reply = await options.facilitator.request(
        "POST",
        `/channels/${channelId}/close-request`,
        ChannelCloseRequestResponseSchema,
        { body: { deadline: deadline.toString(), signature } },
      );
      put(entry, { status: "closing" });
      const route = entry.record.closeRoute;
      if (closeOptions.cooperative === false || route === undefined || options.fetch === undefined)
        return reply;
      // The seller's gate seals the channel, hands its last voucher over and closes: the rest comes back
      // now. Its refusal or absence costs nothing: the close request above already runs the delay.
      try {
        const url = new URL(route.url);
        const gate = createFacilitatorClient({ url: url.origin, fetch: options.fetch, timeoutMs: 60_000 });
        const cooperative = await gate.request(
          route.method,
          `${url.pathname}${url.search}`,
          ChannelCloseResponseSchema,
          {
            headers: { [CHANNEL_CLOSE_HEADER]: channelId },
          },
        );
        if (cooperative.channelId.toLowerCase() !== channelId.toLowerCase()) {
          return { ...reply, cooperativeError: "the gate answered for another channel" };
        }
        if (cooperative.status === "closed") {
          put(entry, { status: "closed" });
          live.delete(channelId);
        }
        return { ...reply, cooperative };
      } catch (error) {
        return { ...reply, cooperativeError: error instanceof Error ? error.message : String(error) };
      }
    },
    async refresh(channelId) {
      const entry = live.get(channelId);
      if (entry === undefined) return undefined;
      let state: ReturnType<typeof ChannelStateSchema.parse>;
      try {
        state = await options.facilitator.request("GET", `/channels/${channelId}`, ChannelStateSchema);
      } catch (error) {
        if (isTollgateError(error, "NotFound")) {
          // Never opened: past its authorization's validity it never will be.
          if (entry.record.status === "opening" && entry.record.openValidBefore < unixSeconds(clock)) {
            put(entry, { status: "closed" });
          }
          return entry.record;
        }
        throw error;
      }
      put(entry, {
        deposit: BigInt(state.deposit),
        status: state.closed ? "closed" : state.closeRequestedAt !== 0 ? "closing" : "open",
      });
      if (entry.record.status === "closed") live.delete(channelId);
      return entry.record;
    },
    async topUp(channelId, amount) {
      const entry = live.get(channelId);
      if (entry === undefined) throw new TollgateError("NotFound", "no such channel in this wallet");
      await topUp(entry, undefined, amount);
      return entry.record;
    },
    async withdraw(channelId) {
      const entry = live.get(channelId);
      const reply = await options.facilitator.request(
        "POST",
        `/channels/${channelId}/withdraw`,
        ChannelWithdrawResponseSchema,
        { body: {} },
      );
      if (entry !== undefined) {
        put(entry, { status: "closed" });
        live.delete(channelId);
      }
      return reply;
    },
    lastUsed: (channelId) => usedAt.get(channelId),
  };
}
