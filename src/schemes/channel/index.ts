/**
 * `channel`: pay per request from a prepaid channel. The payer deposits once (gasless, one wallet
 * signature authorising a P-256 session key); each request carries a voucher for the running total,
 * checked by the gate locally in about 0.1 ms and claimed on chain in batches (docs/channels.md).
 */
import { defineScheme } from "../registry.ts";
import { channelAbout } from "./about.ts";
import { channelAgent } from "./agent.ts";
import { channelClient } from "./client.ts";
import { channelGate } from "./gate.ts";

export const channelScheme = defineScheme({
  ...channelAbout,
  gate: channelGate,
  client: channelClient,
  agent: channelAgent,
});
