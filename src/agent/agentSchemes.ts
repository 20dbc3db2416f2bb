/**
 * The agent's built-in schemes, in the order of `builtinSchemes`: each scheme's `about.ts` and its
 * agent part (`src/schemes/<id>/agent.ts`), and no other part of it. The agent's one composition root
 * of schemes (docs/architecture.md, "The scheme seam"): the agent core asks these parts, or those of
 * `agentSchemesWith(extra)`, and names no scheme itself. Adding a built-in scheme is one line here.
 */
import { channelAbout } from "../schemes/channel/about.ts";
import { channelAgent } from "../schemes/channel/agent.ts";
import { exactAbout } from "../schemes/exact/about.ts";
import { exactAgent } from "../schemes/exact/agent.ts";
import { meteredAbout } from "../schemes/metered/about.ts";
import { meteredAgent } from "../schemes/metered/agent.ts";
import { subscriptionAbout } from "../schemes/subscription/about.ts";
import { subscriptionAgent } from "../schemes/subscription/agent.ts";
import type { Scheme } from "../schemes/types.ts";
import { x402ExactAbout } from "../schemes/x402Exact/about.ts";
import { x402ExactAgent } from "../schemes/x402Exact/agent.ts";
import { type AgentScheme, type AgentSchemes, createAgentSchemes } from "./agentScheme.ts";

export const builtinAgentSchemes: readonly AgentScheme[] = [
  { ...subscriptionAbout, agent: subscriptionAgent },
  { ...meteredAbout, agent: meteredAgent },
  { ...exactAbout, agent: exactAgent },
  { ...x402ExactAbout, agent: x402ExactAgent },
  { ...channelAbout, agent: channelAgent },
];

/** The built-in schemes alone: what an agent asks when it was given no extra scheme. */
export const defaultAgentSchemes: AgentSchemes = createAgentSchemes(builtinAgentSchemes);

/**
 * The built-ins followed by `extra` schemes that bring an agent part (`paidTool({ schemes: [toy] })`).
 * Throws `InvalidRequest` when an extra scheme's id or listed pricing type clashes with another's.
 */
export function agentSchemesWith(extra: readonly Scheme[] | undefined): AgentSchemes {
  return extra === undefined || extra.length === 0
    ? defaultAgentSchemes
    : createAgentSchemes(builtinAgentSchemes, extra);
}
