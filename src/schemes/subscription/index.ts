/** `subscription`: an on-chain plan; its subscribers are served without a payment per request. */
import { defineScheme } from "../registry.ts";
import { subscriptionAbout } from "./about.ts";
import { subscriptionAgent } from "./agent.ts";
import { subscriptionClient } from "./client.ts";
import { subscriptionGate } from "./gate.ts";

export const subscriptionScheme = defineScheme({
  ...subscriptionAbout,
  gate: subscriptionGate,
  client: subscriptionClient,
  agent: subscriptionAgent,
});
