/** `metered`: a plan whose calls draw units from an allowance, then pay overage (served as subscriptions). */
import { defineScheme } from "../registry.ts";
import { meteredAbout } from "./about.ts";
import { meteredAgent } from "./agent.ts";
import { meteredGate } from "./gate.ts";

export const meteredScheme = defineScheme({
  ...meteredAbout,
  gate: meteredGate,
  agent: meteredAgent,
});
