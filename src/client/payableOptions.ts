/**
 * Which options of a 402 a payer can pay once, and which plans it may subscribe to: one reading shared
 * by `payer.pay` (given a whole 402) and `fetchWithPayment`'s default chooser, so both pick alike.
 */
import { TollgateError } from "../protocol/errors.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import { sameFacilitatorUrl } from "./facilitatorClient.ts";

/** What these checks need to know of a payer. */
export type PayerView = { network: string; facilitator: { url: string } };

/** Options the payer could pay once: `exact`, on its network, through its facilitator. */
export function payableOptions(options: readonly PaymentOption[], payer: PayerView): PaymentOption[] {
  return options.filter(
    (o) =>
      o.scheme === "exact" &&
      o.network === payer.network &&
      (o.tollgate?.facilitator === undefined ||
        sameFacilitatorUrl(o.tollgate.facilitator, payer.facilitator.url)),
  );
}

/** Options the payer can pay once within the ceiling, cheapest first. */
export function affordableOptions(
  options: readonly PaymentOption[],
  payer: PayerView,
  maxPrice: bigint,
): PaymentOption[] {
  return cheapestFirst(payableOptions(options, payer).filter((o) => BigInt(o.amount) <= maxPrice));
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
        o.scheme === "subscription" &&
        o.tollgate?.subscriptionScheme === true &&
        o.tollgate.planId !== undefined &&
        o.tollgate.successorPlanId === undefined &&
        o.network === payer.network &&
        sameFacilitatorUrl(o.tollgate.facilitator, payer.facilitator.url) &&
        BigInt(o.amount) <= maxPrice,
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
): TollgateError {
  const payable = payableOptions(options, payer);
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
