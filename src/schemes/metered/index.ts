/** `metered`: a plan whose calls draw units from an allowance, then pay overage (served as subscriptions). */
import { defineScheme } from "../registry.ts";
import { meteredGate } from "./gate.ts";

export const meteredScheme = defineScheme({
  id: "metered",
  description: "a metered plan: each call draws units from the period's allowance, then pays overage",
  gate: meteredGate,
});
