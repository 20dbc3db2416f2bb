/**
 * A specialist's options (docs/agents.md, specialists): what `createSpecialist` and its HTTP app
 * (specialistApp.ts) read.
 */
import type { Logger } from "pino";
import type { Address } from "viem";
import type { FetchFn } from "../http/facilitatorClient.ts";
import type { MarketClient } from "../market/marketClient.ts";
import type { Clock } from "../protocol/clock.ts";
import type { ManifestSigner } from "../protocol/manifest.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";
import type { SpecialistMcpOptions } from "./mcp/specialistMcp.ts";
import type { Capability } from "./tools/capability.ts";

export type SpecialistPlan = {
  planId: string;
  /** The plan's terms as created on chain (for the manifest); amounts in smallest units. */
  amount: bigint;
  interval: number;
  includedUnits: number;
  overageUnitPrice: bigint;
  manager: Address;
};

export type CreateSpecialistOptions = {
  name: string;
  description?: string | undefined;
  /** The payout account: receives payments and signs the manifest. */
  account: ManifestSigner;
  capabilities: readonly Capability[];
  facilitator: string;
  network: `eip155:${number}`;
  token: Address;
  /** On-chain plans for capabilities priced by subscription, by capability name. */
  plans?: Readonly<Record<string, SpecialistPlan>> | undefined;
  /** Provider API key at the facilitator (needed to record metered usage). */
  providerApiKey?: string | undefined;
  /**
   * The reverse proxies in front of the specialist, whose `X-Forwarded-For` its gate believes (the
   * gate's `trustedProxies`; default none): its per-client limits share by the client behind them.
   */
  trustedProxies?: readonly string[] | undefined;
  /** A market to register with on `start()`. */
  market?: string | MarketClient | undefined;
  memoSecret?: Uint8Array | undefined;
  replayGuard?: ReplayGuard | undefined;
  host?: string | undefined;
  port?: number | undefined;
  fetch?: FetchFn | undefined;
  clock?: Clock | undefined;
  logger?: Pick<Logger, "info" | "warn" | "error"> | undefined;
  /**
   * The capabilities as MCP tools behind the same gate (docs/mcp.md): Streamable HTTP at `path` on
   * this app (default `/mcp`, listed in the manifest) and `serveMcp(transport)` for stdio; `false`: none.
   */
  mcp?: SpecialistMcpOptions | undefined;
  /**
   * Prepaid channels for capabilities priced `{ type: "channel" }` (docs/channels.md): the
   * `TollgateChannels` contract, and the gate's voucher journal and minimum deposit. Vouchers are
   * handed to the facilitator with `providerApiKey`.
   */
  channels?: SpecialistChannels | undefined;
};

/** The gate's channel settings for a specialist. */
export type SpecialistChannels = {
  contract: Address;
  /** The gate's voucher journal (default `.tollgate/channel-vouchers.journal`). */
  journal?: string | undefined;
  /** The smallest deposit accepted, smallest unit (default: the price). */
  minDeposit?: bigint | undefined;
};
