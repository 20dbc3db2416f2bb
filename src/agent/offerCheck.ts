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
import { type Clock, systemClock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { Manifest, ManifestPricing } from "../protocol/manifest.ts";
import type { PaymentRequired } from "../protocol/paymentRequired.ts";
import type { X402PaymentRequired, X402PaymentRequirements } from "../protocol/x402.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Queryable } from "../store/store.ts";
import type { AgentSchemes, OfferDeviation } from "./agentScheme.ts";
import { defaultAgentSchemes } from "./agentSchemes.ts";

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

function mismatch(tool: string, listing: OfferListing, deviation: OfferDeviation): TollgateError {
  return new TollgateError(
    "OfferMismatch",
    `${tool}: the seller's 402 asks ${deviation.field} ${deviation.asked}, but its ${listing.source} listing says ${deviation.listed}; refused before paying`,
    { details: { tool, seller: listing.seller, source: listing.source, ...deviation } },
  );
}

/**
 * Holds an option to the agent's own bounds before anything is reserved, as the part of its scheme
 * does (a `channel` option whose close delay is above `maxCloseDelay`, seconds, would let its seller,
 * should it vanish, keep the deposit locked that long after the agent asked to close). Returns the
 * refusal — for a channel, `OfferMismatch` with `details` `{ tool, field: "closeDelay", payee, asked,
 * bound }` — or `undefined` when the option is within (or its scheme has no such bound).
 */
export function channelCloseDelayRefusal(
  option: PaymentRequired["accepts"][number],
  maxCloseDelay: number,
  tool: string,
  schemes: AgentSchemes = defaultAgentSchemes,
): TollgateError | undefined {
  return schemes.offer(option.scheme)?.refusal?.(option, { maxCloseDelay }, tool);
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
  schemes: AgentSchemes = defaultAgentSchemes,
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
      : optionDeviation(schemes, option, listing);
    if (deviation !== undefined) throw mismatch(tool, listing, deviation);
  }
  return { ...paymentRequired, accepts: inToken };
}

/**
 * What one option of a Tollgate 402 asks beyond its listing, as the part of its scheme checks it. An
 * option of a scheme no part answers for conforms to nothing listed: it is refused as a plan option
 * without plan terms, as any option that is neither a one-time nor a channel payment always was.
 */
function optionDeviation(
  schemes: AgentSchemes,
  option: PaymentRequired["accepts"][number],
  listing: OfferListing,
): OfferDeviation | undefined {
  const part = schemes.offer(option.scheme);
  if (part === undefined) return { field: "plan", listed: "a plan", asked: "an option without plan terms" };
  return part.check(option, listing.pricing);
}

/**
 * The same rules for an x402 server's `PAYMENT-REQUIRED`: only options of x402 schemes an agent part
 * pays (`exact`), on the listed network, in the listed token, paying the listed `payTo` no more than
 * the listed price are kept. Options of schemes the payer cannot pay are left to the payer to skip.
 */
export function checkX402PaymentRequired(
  paymentRequired: X402PaymentRequired,
  listing: OfferListing,
  tool: string,
  schemes: AgentSchemes = defaultAgentSchemes,
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
    const deviation = x402Deviation(schemes, option, listing);
    if (deviation !== undefined) throw mismatch(tool, listing, deviation);
  }
  return { ...paymentRequired, accepts: inToken };
}

function x402Deviation(
  schemes: AgentSchemes,
  option: X402PaymentRequirements,
  listing: OfferListing,
): OfferDeviation | undefined {
  if (!isAddressLike(option.payTo) || !sameAddress(option.payTo, listing.payTo)) {
    return { field: "payTo", listed: listing.payTo, asked: option.payTo };
  }
  const part = schemes.x402(option.scheme);
  if (part === undefined) {
    return { field: "scheme", listed: schemes.x402Schemes.join(", "), asked: option.scheme };
  }
  return part.check(option, listing.pricing);
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
