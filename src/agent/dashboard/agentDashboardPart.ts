/**
 * What a scheme's agent part shows on one agent's page of the agent operator's dashboard
 * (`AgentSchemePart.dashboard`): panels of its own (the subscriptions the agent holds) and notes under
 * the policy's reasons (the plans the policy decided to cancel). The agent views name no scheme: they
 * show what the parts they are given contribute, in the parts' list order.
 *
 * A leaf of types: it imports only the HTTP page kit's and the store's types, so an agent part may
 * import it without loading the views.
 */
import type { DisplayToken } from "../../http/dashboardLayout.ts";
import type { SafeHtml } from "../../http/html.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";

/** When a subscription renews next (unix seconds), or `undefined` when that is not known. */
export type AgentNextRenewal = (manager: string, subscriptionId: bigint) => Promise<number | undefined>;

/** What the agent views know that a part's contribution may use. */
export type AgentDashboardHost = {
  clock: Clock;
  /** The token amounts are shown in. */
  token: DisplayToken;
  /** Renewal dates from the facilitator's index or the chain, when the views were given them. */
  nextRenewal?: AgentNextRenewal | undefined;
};

/** What a part shows on one agent's page. */
export type AgentDashboardView = {
  /** Panels (each a `<section class="panel">`) placed after "Limits by seller", in order. */
  panels: readonly SafeHtml[];
  /** Shown inside "The policy's reasons" under its table (a plan's cancel decisions); `""` for none. */
  policyNotes: SafeHtml | string;
};

/** A part's reads for one agent's page, made while the agents' store was open. */
export type AgentDashboardLoad = {
  /**
   * The part's view, after the page released the agents' store: reads that go past it (a renewal
   * date from the facilitator's index) happen here, and a failed one shows as unknown.
   */
  render(): Promise<AgentDashboardView>;
};

/** A scheme's contribution to the agent operator's page of one agent. */
export type AgentDashboardPart = {
  /**
   * Reads what the part shows for `agent` from the agents' `store`, while the page holds it open
   * (`tollgate dashboard` opens a PGlite directory for one page view): store reads only.
   */
  load(store: Store, agent: string, host: AgentDashboardHost): Promise<AgentDashboardLoad>;
};
