/**
 * `x402Exact`: x402 v2 `exact` interop. A standard x402 client pays a route's one-time offers with
 * `PAYMENT-SIGNATURE`, settled through the facilitator before the handler runs. Its client side pays
 * servers that speak only x402 (`createPayX402`, used by `fetchWithPayment`).
 */
import { defineScheme } from "../registry.ts";
import { x402ExactAbout } from "./about.ts";
import { x402ExactAgent } from "./agent.ts";
import { x402ExactClient } from "./client.ts";
import { x402ExactGate } from "./gate.ts";

export const x402ExactScheme = defineScheme({
  ...x402ExactAbout,
  gate: x402ExactGate,
  client: x402ExactClient,
  agent: x402ExactAgent,
});
