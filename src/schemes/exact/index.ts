/** `exact`: pay once per request through the facilitator, shown to the gate as its proof (`X-PAYMENT`). */
import { defineScheme } from "../registry.ts";
import { exactClient } from "./client.ts";
import { exactGate } from "./gate.ts";

export const exactScheme = defineScheme({
  id: "exact",
  description: "pay once per request: an EIP-3009 transfer settled by the facilitator, shown as its proof",
  gate: exactGate,
  client: exactClient,
});
