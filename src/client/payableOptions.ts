/**
 * Which options of a 402 a payer can pay per call, and within a ceiling: one reading shared by
 * `payer.pay` (given a whole 402) and `fetchWithPayment`'s choosers, so both pick alike.
 */
import { sameFacilitatorUrl } from "../http/facilitatorClient.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import type { ClientSchemePart, SchemeId, SchemePayer } from "../schemes/types.ts";

/** What these checks need to know of a payer. */
export type PayerView = { network: string; facilitator: { url: string } };

/** The client parts that pay per call, by scheme id (`SchemeRegistry.client`). */
export type CallPayers = (scheme: SchemeId) => ClientSchemePart | undefined;

/** Those of `payers` whose payments are the payer's own one-time payments (`oneTime`). */
export function oneTimePayersOf(payers: CallPayers): CallPayers {
  return (scheme) => {
    const part = payers(scheme);
    return part?.oneTime === true ? part : undefined;
  };
}

/**
 * Options the payer could pay per call: of a scheme whose client part in `payers` pays, and which that
 * part can pay (network, facilitator, terms).
 */
export function payableOptions(
  options: readonly PaymentOption[],
  payer: PayerView,
  payers: CallPayers,
): PaymentOption[] {
  return options.filter((o) => {
    const part = payers(o.scheme);
    return part?.pay !== undefined && part.payable(o, payer as SchemePayer);
  });
}

/** Options the payer can pay per call within the ceiling, cheapest call first. */
export function affordableOptions(
  options: readonly PaymentOption[],
  payer: PayerView,
  maxPrice: bigint,
  payers: CallPayers,
): PaymentOption[] {
  const priced = payableOptions(options, payer, payers)
    .map((option) => ({ option, price: (payers(option.scheme) as ClientSchemePart).callPrice(option) }))
    .filter((entry) => entry.price <= maxPrice);
  priced.sort((a, b) => (a.price < b.price ? -1 : a.price > b.price ? 1 : 0));
  return priced.map((entry) => entry.option);
}

/**
 * Why nothing could be paid once: `UnsupportedNetwork` when no option is payable by this payer at
 * all, else `PriceCeilingExceeded` naming the cheapest price.
 */
export function noAffordableOption(
  options: readonly PaymentOption[],
  payer: PayerView,
  maxPrice: bigint,
  payers: CallPayers,
): TollgateError {
  const payable = payableOptions(options, payer, payers);
  const cheapest = cheapestFirst(payable)[0];
  if (cheapest === undefined) {
    const offered = options.map((o) => ({
      scheme: o.scheme,
      network: o.network,
      facilitator: o.tollgate?.facilitator,
    }));
    // Options of a scheme this payer pays, refused only for their network or facilitator: say so.
    const known = options.filter((o) => payers(o.scheme)?.pay !== undefined);
    const mismatch = facilitatorMismatch(known, payer);
    if (mismatch !== undefined) {
      return new TollgateError("UnsupportedNetwork", mismatch.message, {
        details: { ...mismatch.details, offered },
      });
    }
    return new TollgateError(
      "UnsupportedNetwork",
      `no option of this 402 is payable on ${payer.network} through this payer's facilitator`,
      { details: { offered } },
    );
  }
  return new TollgateError("PriceCeilingExceeded", "every option costs more than the price ceiling", {
    details: { cheapest: cheapest.amount, maxPrice: maxPrice.toString() },
  });
}

/** Options by their stated amount, cheapest first (stable: the gate's order breaks ties). */
export function cheapestFirst(options: PaymentOption[]): PaymentOption[] {
  return [...options].sort((a, b) => {
    const x = BigInt(a.amount);
    const y = BigInt(b.amount);
    return x < y ? -1 : x > y ? 1 : 0;
  });
}

/** Why a payer's facilitator cannot pay a seller's options: a sentence, and its facts for `details`. */
export type FacilitatorMismatch = {
  /** Names what the seller asks for, the payer's facilitator and what to do. */
  message: string;
  details: {
    reason: "other_network" | "other_facilitator";
    /** The networks the seller asks for, and the facilitators its options name. */
    networks: string[];
    facilitators: string[];
    payerNetwork: string;
    payerFacilitator: string;
  };
};

/**
 * Whether `options` (of schemes the payer pays) are out of its reach only because of where it pays:
 * none is on the network its facilitator settles on, or those that are name another facilitator,
 * whose proofs are the only ones their gate accepts. `undefined` when some option is within reach, or
 * there is none: the refusal is then about something else.
 */
export function facilitatorMismatch(
  options: readonly PaymentOption[],
  payer: PayerView,
): FacilitatorMismatch | undefined {
  if (options.length === 0) return undefined;
  const mine = payer.facilitator.url;
  const onMyNetwork = options.filter((o) => o.network === payer.network);
  const elsewhere = (o: PaymentOption) => {
    const named = o.tollgate?.facilitator;
    return named !== undefined && !sameFacilitatorUrl(named, mine);
  };
  const reason =
    onMyNetwork.length === 0
      ? "other_network"
      : onMyNetwork.every(elsewhere)
        ? "other_facilitator"
        : undefined;
  if (reason === undefined) return undefined;
  const asked = reason === "other_network" ? options : onMyNetwork;
  const networks = unique(asked.map((o) => o.network));
  const facilitators = unique(asked.flatMap((o) => o.tollgate?.facilitator ?? []));
  const theirs = facilitators.join(" or ");
  const asks = `the seller asks for payment on ${networks.join(" or ")}${theirs === "" ? "" : ` through the facilitator at ${theirs}`}`;
  const yours =
    reason === "other_network"
      ? `your facilitator at ${mine} settles on ${payer.network}`
      : `your facilitator at ${mine} is another facilitator, whose proofs the seller does not accept`;
  const fix =
    theirs === ""
      ? `point the payer at a facilitator that settles on ${networks.join(" or ")}, such as the seller's`
      : `point the payer at the seller's facilitator (${theirs})`;
  return {
    message: `${asks}; ${yours}: ${fix}`,
    details: { reason, networks, facilitators, payerNetwork: payer.network, payerFacilitator: mine },
  };
}

function unique(values: readonly string[]): string[] {
  return [...new Set(values)];
}
