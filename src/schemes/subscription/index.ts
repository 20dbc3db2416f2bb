/** `subscription`: an on-chain plan; its subscribers are served without a payment per request. */
import { defineScheme } from "../registry.ts";
import { subscriptionClient } from "./client.ts";
import { subscriptionGate } from "./gate.ts";

export const subscriptionScheme = defineScheme({
  id: "subscription",
  description: "a SubscriptionManager plan: subscribers send X-Tollgate-Sub and a sub-auth token",
  gate: subscriptionGate,
  client: subscriptionClient,
});
