/**
 * The agent's part of a payment scheme (docs/architecture.md, "The scheme seam"): what an agent asks
 * a scheme instead of switching on its name. A scheme's folder provides it as
 * `src/schemes/<id>/agent.ts`; the agent's list of built-ins (`agentSchemes.ts`) pairs it with the
 * scheme's `about.ts`, and a scheme that is not built in brings it as `Scheme.agent`
 * (`paidTool({ schemes: [toy] })`).
 *
 * Its members, each optional:
 * - `listing`: pricing entries a seller lists (a manifest's or a market's `pricing`, by `type`): how
 *   to describe one to a model, how the budget holds a spend under it, whether a first call under it
 *   commits to more than the call, and how a specialist sells under it.
 * - `offer`: options of a 402 whose `scheme` is this scheme's id: whether one conforms to the
 *   listing, what the policy weighs it as, and how a spend paid through it is reported.
 * - `x402`: requirements of an x402 server's `PAYMENT-REQUIRED` this scheme pays.
 * - `mcpReceipts`: the MCP `_meta` keys of its receipts and the headers they become.
 * - `purchase`: how a paid tool holds, pays and books a call under it (paidTool/purchasePart.ts).
 * - `dashboard`: its panels on the agent operator's page of an agent.
 *
 * Invariants: an agent part imports only the agent core's leaf types (this file, `policy/policyOffer.ts`,
 * `budget/budgetLimits.ts`, `spendReport.ts`, `dashboard/agentDashboardPart.ts`,
 * `paidTool/purchasePart.ts`), the protocol, the HTTP page kit (for its dashboard panels), the payer
 * and its own scheme folder, never a module that loads the agent's list of built-ins (that would close
 * an import circle; `npm run deps` finds one). `listing`, `offer` and `x402` are pure and cheap: they
 * run per listing and per 402.
 */
import type { Address } from "viem";
import { formatUnitsExact } from "../protocol/amount.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { ManifestPricing } from "../protocol/manifest.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import type { CapabilityPricingView } from "../protocol/pricing.ts";
import type { X402PaymentRequirements } from "../protocol/x402.ts";
import type { Scheme, SchemeId } from "../schemes/types.ts";
import type { SpendKind } from "./budget/budgetLimits.ts";
import type { AgentDashboardPart } from "./dashboard/agentDashboardPart.ts";
import type { PurchasePart } from "./paidTool/purchasePart.ts";
import type { PolicyChannel, PolicyPlan } from "./policy/policyOffer.ts";
import type { SpendMode } from "./spendReport.ts";

/** What one 402 option asks that its listing does not offer (an `OfferMismatch`'s details). */
export type OfferDeviation = {
  field: "network" | "token" | "payTo" | "scheme" | "price" | "plan";
  listed: string;
  asked: string;
};

/** How the budget holds a spend under a listed entry: per call, or a plan's period (keyed by `ref`). */
export type ListedSpend = { kind: SpendKind; ref?: string | undefined };

/** What a specialist selling under a listed pricing type has set up. */
export type SaleSetup = {
  /** The plan it created on chain, when it sells one. */
  plan?: { planId: string } | undefined;
  /** The `TollgateChannels` contract it sells prepaid channels in, when it does. */
  channelsContract?: Address | undefined;
};

/**
 * The ways the policy weighs paying one seller (docs/policy.md): once per call, by a plan's period,
 * or from a prepaid channel. Each is a slot of `PolicyOffer`; a scheme's option fills one of them.
 */
export type PolicyTerms =
  | { choice: "oneTime"; terms: { amount: bigint } | undefined }
  | { choice: "subscription"; terms: PolicyPlan | undefined }
  | { choice: "channel"; terms: PolicyChannel | undefined };

/** The listing side of an agent part: pricing entries of `types`. */
export type AgentListingPart = {
  /** The pricing `type`s this part answers for (`one-time`; `subscription`; …), unique across parts. */
  readonly types: readonly string[];
  /** One entry in words for the model that chooses tools: `"0.02 USDC per call, paid once per call"`. */
  describe(entry: ManifestPricing): string;
  /**
   * Whether a first call under an entry may commit to more than the call (a plan's period, a
   * channel's deposit): such a call runs alone before its seller's other calls.
   */
  readonly commits: boolean;
  /** How the budget holds a spend of the entry's amount to `seller` (for checks before a call). */
  spend(entry: ManifestPricing, seller: string): ListedSpend;
  /** How a specialist sells under this type; absent for a type a seller does not write. */
  sale?: AgentSalePart | undefined;
};

/** How a specialist sells a capability priced under one listed type. */
export type AgentSalePart = {
  /**
   * What the seller lacks to sell under this type, completing `"capability X is priced by <type>
   * but …"` (`"the specialist has no channels contract"`), or `undefined` when it has it all.
   */
  missing(setup: SaleSetup): string | undefined;
  /**
   * The gate's pricing entry for one capability pricing entry (`{ type: "one-time", amount }`),
   * asked after `missing` found nothing lacking.
   */
  gateEntry(entry: CapabilityPricingView, setup: SaleSetup): { type: string } & Record<string, unknown>;
};

/** The offer side of an agent part: 402 options whose `scheme` is this scheme's id. */
export type AgentOfferPart = {
  /**
   * What `option` asks beyond the `listed` pricing of its capability (a higher price, other plan
   * terms, another contract), or `undefined` when it conforms. `payTo`, network and token are
   * checked by the core before.
   */
  check(option: PaymentOption, listed: readonly ManifestPricing[]): OfferDeviation | undefined;
  /**
   * What the policy weighs `option` as, or `undefined` when it is no candidate (a plan option
   * without plan terms). A candidate whose terms offer nothing (a zero price) has `terms: undefined`.
   */
  policyTerms(option: PaymentOption): PolicyTerms | undefined;
  /** How a spend paid through an option of this scheme is reported (`onSpend`, the tool's artifact). */
  readonly spendMode: Exclude<SpendMode, "free">;
  /**
   * Whether a payment of this scheme whose outcome is unknown (its payment call failed) can be read
   * back from the facilitator by its memo's nonce (an EIP-3009 authorization): then it is recovered,
   * or held pending, instead of released (`recoverPayment`).
   */
  readonly readsBack?: boolean | undefined;
  /**
   * Why the agent refuses `option` under its own bounds before reserving anything (a channel whose
   * close delay is above `maxCloseDelay`), or `undefined`.
   */
  refusal?(option: PaymentOption, bounds: OfferBounds, tool: string): TollgateError | undefined;
};

/** The agent's own bounds on what it accepts of an offer. */
export type OfferBounds = {
  /** The longest close delay, seconds, a prepaid deposit may stay locked after the agent asks to close. */
  maxCloseDelay: number;
};

/**
 * The x402 side of an agent part: requirements of an x402 server's `PAYMENT-REQUIRED` (x402 v2)
 * whose `scheme` is one of `schemes`, which this scheme pays.
 */
export type AgentX402Part = {
  /** The x402 `scheme`s of requirements this part pays (`exact`). */
  readonly schemes: readonly string[];
  /** What a requirement asks beyond the `listed` pricing (`payTo`, network and asset checked before). */
  check(requirement: X402PaymentRequirements, listed: readonly ManifestPricing[]): OfferDeviation | undefined;
};

/**
 * The agent's part of a scheme. Every member is optional: a scheme the agent never meets in a
 * listing or a 402 (x402 `exact`, whose `PAYMENT-REQUIRED` the agent reads apart) has an empty part.
 *
 * @example
 * export const toyAgent: AgentSchemePart = {
 *   offer: {
 *     check: (option, listed) => undefined,
 *     policyTerms: (option) => ({ choice: "oneTime", terms: { amount: BigInt(option.amount) } }),
 *     spendMode: "one-time",
 *   },
 * };
 */
export type AgentSchemePart = {
  listing?: AgentListingPart | undefined;
  offer?: AgentOfferPart | undefined;
  x402?: AgentX402Part | undefined;
  /**
   * Over MCP: the `_meta` keys of a tool result that carry this scheme's receipts, each with the
   * response header the payer reads it from (the gate part's `mcp.receipts`, the other way round).
   */
  mcpReceipts?: Readonly<Record<string, string>> | undefined;
  /**
   * Over MCP: the `_meta` key a paid retry carries this scheme's credential under, each with the request
   * header it is copied from, or how it is read from the request's headers (`undefined`: not there).
   * The gate part's `mcp.credentials`, the other way round.
   */
  mcpCredentials?: Readonly<Record<string, string | ((headers: Headers) => unknown)>> | undefined;
  /** How a paid tool buys through this scheme: its steps in one call (src/agent/paidTool/purchasePart.ts). */
  purchase?: PurchasePart | undefined;
  /**
   * What the agent operator's page of one agent shows of this scheme (the subscriptions it holds,
   * with their next renewal): read from the agents' store, rendered with the page kit of src/http/
   * (src/agent/dashboard/agentDashboardPart.ts).
   */
  dashboard?: AgentDashboardPart | undefined;
};

declare module "../schemes/types.ts" {
  // The scheme seam names no agent type: `Scheme.agent` is this part, merged in from here.
  interface SchemeAgentPart extends AgentSchemePart {}
}

/** A scheme as the agent knows it: its id, description and agent part. */
export type AgentScheme = {
  readonly id: SchemeId;
  readonly description: string;
  readonly agent: AgentSchemePart;
};

/**
 * The schemes an agent knows, in precedence order, looked up by what it meets: a 402 option's
 * `scheme`, a listed entry's `type`. Built once per tool or orchestrator; nothing is added later.
 */
export type AgentSchemes = {
  readonly schemes: readonly AgentScheme[];
  /** The part answering for 402 options of `scheme`, if any. */
  offer(scheme: string): AgentOfferPart | undefined;
  /** The part answering for listed pricing entries of `type`, if any. */
  listing(type: string): AgentListingPart | undefined;
  /** The part paying x402 requirements of `scheme`, if any. */
  x402(scheme: string): AgentX402Part | undefined;
  /** Every x402 `scheme` some part pays, in order. */
  readonly x402Schemes: readonly string[];
  /** Every part's MCP receipts: `[_meta key, response header]`, in order. */
  readonly mcpReceipts: readonly (readonly [string, string])[];
  /** Every part's MCP credentials: `[_meta key, request header or reader]`, in order. */
  readonly mcpCredentials: readonly (readonly [string, string | ((headers: Headers) => unknown)])[];
};

/** An atomic USDC amount as people read it: `10000` → `"0.01 USDC"`. */
export function usdcText(amount: string | bigint): string {
  return `${formatUnitsExact(BigInt(amount))} USDC`;
}

/**
 * The agent's schemes: `base` (the built-ins, `agentSchemes.ts`) followed by the agent parts of
 * `extra` (schemes without one are left out). Throws `InvalidRequest` when an id or a listed pricing
 * type is registered twice: an extra scheme never replaces a built-in one.
 */
export function createAgentSchemes(
  base: readonly AgentScheme[],
  extra: readonly Scheme[] = [],
): AgentSchemes {
  const schemes: AgentScheme[] = [...base];
  for (const scheme of extra) {
    if (scheme.agent !== undefined) {
      schemes.push({ id: scheme.id, description: scheme.description, agent: scheme.agent });
    }
  }
  const ids = new Set<string>();
  const offers = new Map<string, AgentOfferPart>();
  const listings = new Map<string, AgentListingPart>();
  const x402 = new Map<string, AgentX402Part>();
  for (const { id, agent } of schemes) {
    if (ids.has(id)) {
      throw new TollgateError("InvalidRequest", `schemes: scheme "${id}" is registered twice`, {
        details: { scheme: id },
      });
    }
    ids.add(id);
    if (agent.offer !== undefined) offers.set(id, agent.offer);
    for (const x402Scheme of agent.x402?.schemes ?? []) {
      if (agent.x402 !== undefined && !x402.has(x402Scheme)) x402.set(x402Scheme, agent.x402);
    }
    const listing = agent.listing;
    for (const type of listing?.types ?? []) {
      if (listing === undefined || listings.has(type)) {
        throw new TollgateError(
          "InvalidRequest",
          `schemes: pricing type "${type}" is listed by two schemes`,
          {
            details: { scheme: id, type },
          },
        );
      }
      listings.set(type, listing);
    }
  }
  return {
    schemes,
    offer: (scheme) => offers.get(scheme),
    listing: (type) => listings.get(type),
    x402: (scheme) => x402.get(scheme),
    x402Schemes: [...x402.keys()],
    mcpReceipts: schemes.flatMap((scheme) => Object.entries(scheme.agent.mcpReceipts ?? {})),
    mcpCredentials: schemes.flatMap((scheme) => Object.entries(scheme.agent.mcpCredentials ?? {})),
  };
}
