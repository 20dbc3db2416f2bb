/**
 * Offer checks (docs/budgets.md): a seller's 402 is held to what the agent was offered before
 * it asked — the catalog entry the market listed, or the manifest the seller published. A 402 asking
 * a higher price, other plan terms, another payee, another network or another token is refused with
 * `OfferMismatch` before anything is reserved or signed, so a seller cannot charge more than it
 * advertised by answering the call with a different bill.
 *
 * The seller's identity (what per-provider limits are keyed by) is its listing's `seller`: the address
 * that signed its registration or manifest, never the `payTo` a 402 names. Every option the agent may
 * pay must pay exactly the listed `payTo`, so a seller that rotates `payTo` across calls is refused,
 * not counted as a new provider. A tool with no listing (built by hand with `paidTool`) pins the first
 * payee its origin's 402 names and holds later 402s to it (`createPayeePins`).
 */
import { type Address, getAddress } from "viem";
import { z } from "zod";
import { sameAddress } from "../protocol/address.ts";
import { formatUnitsExact } from "../protocol/amount.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { Manifest, ManifestPricing } from "../protocol/manifest.ts";
import { type PaymentOption, type PaymentRequired, planTermsOf } from "../protocol/paymentRequired.ts";
import type { X402PaymentRequired, X402PaymentRequirements } from "../protocol/x402.ts";
import { channelTermsOf } from "../schemes/channel/channelTerms.ts";
import { closeDelayRefusal } from "../schemes/channel/client/channelWallet.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Queryable } from "../store/store.ts";

/** What the agent was offered for one capability, before any 402. */
export type OfferListing = {
  /**
   * The seller's identity: the key that signed its market registration (the catalog's seller address)
   * or its manifest. Per-provider limits and the ledger's `provider` use it.
   */
  seller: Address;
  /** The payee every option must pay (the manifest's `seller.payTo`). */
  payTo: Address;
  /** CAIP-2 network and token the listing's prices are in. */
  network: string;
  token: Address;
  /** The listed prices of the capability. */
  pricing: readonly ManifestPricing[];
  /** Where the listing came from, for messages: a market's catalog or a seller's manifest. */
  source: "market" | "manifest";
};

/** The listing of one capability of a manifest (a market's stored one, or one fetched from the seller). */
export function listingOf(
  manifest: Pick<Manifest, "seller" | "network" | "token">,
  pricing: readonly ManifestPricing[],
  source: OfferListing["source"],
): OfferListing {
  return {
    seller: manifest.seller.payTo,
    payTo: manifest.seller.payTo,
    network: manifest.network,
    token: manifest.token,
    pricing,
    source,
  };
}

/** What one option asks that its listing does not offer; `undefined` when it conforms. */
type Deviation = {
  field: "network" | "token" | "payTo" | "scheme" | "price" | "plan";
  listed: string;
  asked: string;
};

function mismatch(tool: string, listing: OfferListing, deviation: Deviation): TollgateError {
  return new TollgateError(
    "OfferMismatch",
    `${tool}: the seller's 402 asks ${deviation.field} ${deviation.asked}, but its ${listing.source} listing says ${deviation.listed}; refused before paying`,
    { details: { tool, seller: listing.seller, source: listing.source, ...deviation } },
  );
}

/**
 * A `subscription` option conforms when it names a listed plan (same id) with a price, interval,
 * allowance and overage price no worse for the buyer than listed, sold through the listed manager.
 */
function planDeviation(option: PaymentOption, listing: OfferListing): Deviation | undefined {
  const terms = planTermsOf(option);
  if (terms === undefined) return { field: "plan", listed: "a plan", asked: "an option without plan terms" };
  const entry = listing.pricing.find(
    (p) => (p.type === "subscription" || p.type === "metered") && p.planId === terms.planId,
  );
  if (entry === undefined || entry.type === "one-time" || entry.type === "channel") {
    const listed = listing.pricing.flatMap((p) =>
      p.type === "one-time" || p.type === "channel" ? [] : [p.planId],
    );
    return {
      field: "plan",
      listed: listed.length === 0 ? "no plan" : `plan ${listed.join(", ")}`,
      asked: `plan ${terms.planId}`,
    };
  }
  if (BigInt(terms.amount) > BigInt(entry.amount)) {
    return {
      field: "price",
      listed: `${usdc(entry.amount)} per period`,
      asked: `${usdc(terms.amount)} per period`,
    };
  }
  if (terms.interval !== entry.interval) {
    return { field: "plan", listed: `interval ${entry.interval} s`, asked: `interval ${terms.interval} s` };
  }
  if (terms.includedUnits < entry.includedUnits) {
    return {
      field: "plan",
      listed: `${entry.includedUnits} included units`,
      asked: `${terms.includedUnits} included units`,
    };
  }
  if (BigInt(terms.overageUnitPrice) > BigInt(entry.overageUnitPrice)) {
    return {
      field: "price",
      listed: `overage ${usdc(entry.overageUnitPrice)} per unit`,
      asked: `overage ${usdc(terms.overageUnitPrice)} per unit`,
    };
  }
  if (entry.manager !== undefined && !sameAddress(entry.manager, terms.manager)) {
    return { field: "plan", listed: `manager ${entry.manager}`, asked: `manager ${terms.manager}` };
  }
  return undefined;
}

/** An atomic amount as people read it: `10000` → `0.01 USDC`. */
function usdc(amount: string | bigint): string {
  return `${formatUnitsExact(BigInt(amount))} USDC`;
}

/**
 * A `channel` option conforms when the listing prices the capability by channel, the price per call
 * is no more than listed, the terms are well formed, and the contract is the listed one (when listed).
 */
function channelDeviation(option: PaymentOption, listing: OfferListing): Deviation | undefined {
  const listed = listing.pricing.find((p) => p.type === "channel");
  if (listed === undefined || listed.type !== "channel") {
    return { field: "scheme", listed: "no channel price", asked: "a prepaid channel" };
  }
  const terms = channelTermsOf(option);
  if (terms === undefined) {
    return { field: "scheme", listed: "channel terms", asked: "a channel option without valid terms" };
  }
  if (terms.price > BigInt(listed.amount)) {
    return {
      field: "price",
      listed: `${usdc(listed.amount)} per call`,
      asked: `${usdc(terms.price)} per call`,
    };
  }
  if (listed.contract !== undefined && !sameAddress(listed.contract, terms.contract)) {
    return {
      field: "scheme",
      listed: `channel contract ${listed.contract}`,
      asked: `channel contract ${terms.contract}`,
    };
  }
  return undefined;
}

/**
 * Holds a `channel` option's close delay to the agent's bound: a gate whose minimum close delay is above
 * `maxCloseDelay` (seconds) would let its seller, should it vanish, keep the deposit locked that long
 * after the agent asked to close. Returns the refusal — `OfferMismatch` with `details` `{ tool, field:
 * "closeDelay", payee, asked, bound }` — or `undefined` when the option is within (or not a channel).
 */
export function channelCloseDelayRefusal(
  option: PaymentOption,
  maxCloseDelay: number,
  tool: string,
): TollgateError | undefined {
  const terms = channelTermsOf(option);
  return terms === undefined ? undefined : closeDelayRefusal(terms, maxCloseDelay, tool);
}

function oneTimeDeviation(amount: string, listing: OfferListing): Deviation | undefined {
  const listed = listing.pricing.find((p) => p.type === "one-time");
  if (listed === undefined)
    return { field: "scheme", listed: "no one-time price", asked: "a one-time payment" };
  if (BigInt(amount) > BigInt(listed.amount)) {
    return { field: "price", listed: usdc(listed.amount), asked: usdc(amount) };
  }
  return undefined;
}

/**
 * Keeps the options of a Tollgate 402 the agent may pay under `listing`, or throws `OfferMismatch`.
 *
 * - Options on another network than the listing's are left out; so are options in another token
 *   (another way to pay the agent does not use). When nothing is left, the 402 is refused, naming the
 *   network or token it asked.
 * - Every remaining option must pay the listed `payTo` at no more than the listed price (one-time or
 *   channel, whose contract must be the listed one when listed) or on the listed plan's terms
 *   (subscription). One option that asks more refuses the whole 402: a seller
 *   that bills above its listing is not trusted with the rest of the bill either.
 */
export function checkPaymentRequired(
  paymentRequired: PaymentRequired,
  listing: OfferListing,
  tool: string,
): PaymentRequired {
  const onNetwork = paymentRequired.accepts.filter((o) => o.network === listing.network);
  if (onNetwork.length === 0) {
    throw mismatch(tool, listing, {
      field: "network",
      listed: listing.network,
      asked: [...new Set(paymentRequired.accepts.map((o) => o.network))].join(", "),
    });
  }
  const inToken = onNetwork.filter((o) => sameAddress(o.token, listing.token));
  if (inToken.length === 0) {
    throw mismatch(tool, listing, {
      field: "token",
      listed: listing.token,
      asked: [...new Set(onNetwork.map((o) => o.token))].join(", "),
    });
  }
  for (const option of inToken) {
    const deviation = !sameAddress(option.payTo, listing.payTo)
      ? { field: "payTo" as const, listed: listing.payTo, asked: option.payTo }
      : option.scheme === "exact"
        ? oneTimeDeviation(option.amount, listing)
        : option.scheme === "channel"
          ? channelDeviation(option, listing)
          : planDeviation(option, listing);
    if (deviation !== undefined) throw mismatch(tool, listing, deviation);
  }
  return { ...paymentRequired, accepts: inToken };
}

/**
 * The same rules for an x402 server's `PAYMENT-REQUIRED`: only `exact` options on the listed network,
 * in the listed token, paying the listed `payTo` no more than the listed one-time price are kept.
 * Options of schemes the payer cannot pay are left to the payer to skip.
 */
export function checkX402PaymentRequired(
  paymentRequired: X402PaymentRequired,
  listing: OfferListing,
  tool: string,
): X402PaymentRequired {
  const onNetwork = paymentRequired.accepts.filter((o) => o.network === listing.network);
  if (onNetwork.length === 0) {
    throw mismatch(tool, listing, {
      field: "network",
      listed: listing.network,
      asked: [...new Set(paymentRequired.accepts.map((o) => o.network))].join(", "),
    });
  }
  const inToken = onNetwork.filter((o) => isAddressLike(o.asset) && sameAddress(o.asset, listing.token));
  if (inToken.length === 0) {
    throw mismatch(tool, listing, {
      field: "token",
      listed: listing.token,
      asked: [...new Set(onNetwork.map((o) => o.asset))].join(", "),
    });
  }
  for (const option of inToken) {
    const deviation = x402Deviation(option, listing);
    if (deviation !== undefined) throw mismatch(tool, listing, deviation);
  }
  return { ...paymentRequired, accepts: inToken };
}

function x402Deviation(option: X402PaymentRequirements, listing: OfferListing): Deviation | undefined {
  if (!isAddressLike(option.payTo) || !sameAddress(option.payTo, listing.payTo)) {
    return { field: "payTo", listed: listing.payTo, asked: option.payTo };
  }
  if (option.scheme !== "exact") {
    return { field: "scheme", listed: "exact", asked: option.scheme };
  }
  if (!/^\d{1,78}$/.test(option.amount)) return { field: "price", listed: "an amount", asked: option.amount };
  return oneTimeDeviation(option.amount, listing);
}

function isAddressLike(value: string): value is Address {
  return /^0x[0-9a-fA-F]{40}$/.test(value);
}

/**
 * Payees pinned per origin, for tools without a listing: the first 402 an origin answers fixes the
 * `payTo` its later 402s must name (and the identity its spends are keyed by). Share one across an
 * agent's tools. `createPayeePins()` keeps them for the process; `createStoredPayeePins` in the
 * agent's store (migration 0075), so a later run of the agent is held to the same payee.
 */
export type PayeePins = {
  /** Pins `payTo` for `origin` on first sight; resolves the pinned payee (the first one, always). */
  pin(origin: string, payTo: Address): Promise<Address>;
};

export function createPayeePins(): PayeePins {
  const pins = new Map<string, Address>();
  return {
    async pin(origin, payTo) {
      const pinned = pins.get(origin);
      if (pinned !== undefined) return pinned;
      pins.set(origin, payTo);
      return payTo;
    },
  };
}

const PinRowSchema = z.object({ pay_to: z.string() });

/**
 * Pins kept in the agent's store (`agent_payee_pins`): the first pin of an (agent, origin) wins, in
 * any process, and survives restarts. Pins read once are cached for the process.
 */
export function createStoredPayeePins(options: {
  store: Queryable;
  agent: string;
  clock?: Clock;
}): PayeePins {
  const clock = options.clock ?? systemClock;
  const cache = new Map<string, Address>();
  return {
    async pin(origin, payTo) {
      const cached = cache.get(origin);
      if (cached !== undefined) return cached;
      await options.store.query(
        `INSERT INTO agent_payee_pins (agent, origin, pay_to, pinned_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (agent, origin) DO NOTHING`,
        [options.agent, origin, payTo.toLowerCase(), new Date(clock.now())],
      );
      const row = await queryOneParsed(
        options.store,
        PinRowSchema,
        "SELECT pay_to FROM agent_payee_pins WHERE agent = $1 AND origin = $2",
        [options.agent, origin],
      );
      const pinned = getAddress(row?.pay_to ?? payTo);
      cache.set(origin, pinned);
      return pinned;
    },
  };
}

/**
 * The listing a tool without one is held to: the payee pinned for its origin (pinned now when this is
 * the origin's first 402), any price (the agent's `maxPrice` and budget bound it), the payer's network.
 * Returns the payee every option must pay.
 */
export async function checkPinnedPayee(
  payTos: readonly string[],
  pins: PayeePins,
  origin: string,
  tool: string,
): Promise<Address | undefined> {
  const first = payTos.find(isAddressLike);
  if (first === undefined) return undefined;
  const pinned = await pins.pin(origin, first);
  for (const payTo of payTos) {
    if (!isAddressLike(payTo) || !sameAddress(payTo, pinned)) {
      throw new TollgateError(
        "OfferMismatch",
        `${tool}: the seller's 402 asks payTo ${payTo}, but ${origin} was paid at ${pinned} before; refused before paying`,
        { details: { tool, field: "payTo", listed: pinned, asked: payTo, origin } },
      );
    }
  }
  return pinned;
}
