/** `exact`: pay once per request through the facilitator, shown to the gate as its proof (`X-PAYMENT`). */
import { defineScheme } from "../registry.ts";
import { exactAbout } from "./about.ts";
import { exactAgent } from "./agent.ts";
import { exactClient } from "./client.ts";
import { exactGate } from "./gate.ts";

export const exactScheme = defineScheme({
  ...exactAbout,
  gate: exactGate,
  client: exactClient,
  agent: exactAgent,
});
