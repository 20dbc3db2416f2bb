/**
 * Which options of a 402 a payer can pay per call, and within a ceiling: one reading shared by
 * `payer.pay` (given a whole 402) and `fetchWithPayment`'s choosers, so both pick alike.
 */
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
    return new TollgateError(
      "UnsupportedNetwork",
      `no option of this 402 is payable on ${payer.network} through this payer's facilitator`,
      {
        details: {
          offered: options.map((o) => ({
            scheme: o.scheme,
            network: o.network,
            facilitator: o.tollgate?.facilitator,
          })),
        },
      },
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
