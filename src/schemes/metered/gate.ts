/**
 * The gate part of `metered`: `{ type: "metered", plan }` entries are plans whose subscribers draw the
 * route's `units` from the plan's allowance per use, then pay overage. They are served by the
 * subscription part (one credential, `X-Tollgate-Sub`; the usage ledger meters), so this part only
 * compiles its entries into plan offers.
 */
import { MeteredPricingSchema, parseGateOptions } from "../../gate/paymentGateOptions.ts";
import { compilePlan, type PlanOffer } from "../subscription/gate.ts";
import type { GateSchemePart } from "../types.ts";

export const meteredGate: GateSchemePart<PlanOffer> = {
  pricingTypes: ["metered"],
  create: (context) => ({
    compile(entry, where) {
      const parsed = parseGateOptions(MeteredPricingSchema, entry, `paymentGate options: ${where}`);
      return compilePlan(parsed, context, where);
    },
  }),
};
