/**
 * Which options of a 402 a payer can pay once, and which plans it may subscribe to: one reading shared
 * by `payer.pay` (given a whole 402) and `fetchWithPayment`'s default chooser, so both pick alike.
 */
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import { exactClient } from "../schemes/exact/client.ts";
import { exactScheme } from "../schemes/exact/index.ts";
import { subscriptionClient } from "../schemes/subscription/client.ts";
import type { ClientSchemePart, SchemeId, SchemePayer } from "../schemes/types.ts";

/** What these checks need to know of a payer. */
export type PayerView = { network: string; facilitator: { url: string } };

/** The client parts that pay per call, by scheme id (`SchemeRegistry.client`). */
export type CallPayers = (scheme: SchemeId) => ClientSchemePart | undefined;

/** `payer.pay`'s schemes: `exact` only (one-time payments with a proof). */
export const oneTimePayers: CallPayers = (scheme) => (scheme === exactScheme.id ? exactClient : undefined);

/**
 * Options the payer could pay per call: of a scheme whose client part pays (`exact`, and any scheme
 * passed in `schemes`), and which that part can pay (network, facilitator, terms).
 */
export function payableOptions(
  options: readonly PaymentOption[],
  payer: PayerView,
  payers: CallPayers = oneTimePayers,
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
  payers: CallPayers = oneTimePayers,
): PaymentOption[] {
  const priced = payableOptions(options, payer, payers)
    .map((option) => ({ option, price: (payers(option.scheme) as ClientSchemePart).callPrice(option) }))
    .filter((entry) => entry.price <= maxPrice);
  priced.sort((a, b) => (a.price < b.price ? -1 : a.price > b.price ? 1 : 0));
  return priced.map((entry) => entry.option);
}

/**
 * Subscription options this payer may take out, cheapest per period first: the gate flags them with
 * `tollgate.subscriptionScheme` (§2.1), on the payer's network, run through its facilitator, not
 * deprecated, and priced within `maxPrice` per period.
 */
export function subscribableOptions(
  options: readonly PaymentOption[],
  payer: PayerView,
  maxPrice: bigint,
): PaymentOption[] {
  return cheapestFirst(
    options.filter(
      (o) =>
        subscriptionClient.payable(o, payer as SchemePayer) && subscriptionClient.callPrice(o) <= maxPrice,
    ),
  );
}

/**
 * Why nothing could be paid once: `UnsupportedNetwork` when no option is payable by this payer at
 * all, else `PriceCeilingExceeded` naming the cheapest price.
 */
export function noAffordableOption(
  options: readonly PaymentOption[],
  payer: PayerView,
  maxPrice: bigint,
  payers: CallPayers = oneTimePayers,
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

function cheapestFirst(options: PaymentOption[]): PaymentOption[] {
  return [...options].sort((a, b) => {
    const x = BigInt(a.amount);
    const y = BigInt(b.amount);
    return x < y ? -1 : x > y ? 1 : 0;
  });
}
