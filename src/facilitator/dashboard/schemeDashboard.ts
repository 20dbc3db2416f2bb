/**
 * What a scheme's facilitator part adds to the dashboard (docs/dashboard.md): pages of the provider's
 * section, and answers a section the caller adds may ask for. The dashboard names no scheme: it mounts
 * what the parts it runs contribute, in their list order.
 */
import type { Address, Chain, PublicClient, Transport } from "viem";
import type { WriteClient } from "../../chain/clientTypes.ts";
import type { DisplayToken } from "../../http/dashboardLayout.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { DashboardSection } from "./dashboardApp.ts";
import type { PlanNames, ProviderView } from "./providerSection.ts";

/** When a subscription renews next (unix seconds); undefined when it is not known or not due. */
export type NextRenewal = (manager: string, subscriptionId: bigint) => Promise<number | undefined>;

/** What the dashboard gives the views a part contributes. */
export type ProviderViewHost = {
  /** The token amounts are shown in, and new prices are set in. */
  token: DisplayToken & { address: Address };
  publicClient: Pick<PublicClient<Transport, Chain>, "waitForTransactionReceipt">;
  /** A wallet for the signed-in provider's own key, where this dashboard may send its transactions. */
  providerWallet?: ((provider: Address) => WriteClient | undefined) | undefined;
  /** How long a view waits for the facilitator's index to show a mined change. */
  indexWaitMs?: number | undefined;
};

/** A scheme part's contribution to the dashboard. */
export type SchemeDashboard = {
  /** Pages for the provider's section, placed in its navigation by their entries' `order`. */
  providerViews?(host: ProviderViewHost): readonly ProviderView[];
  /** Renewal dates from this facilitator's index, for a section that shows subscriptions held. */
  nextRenewal?: NextRenewal | undefined;
  /** Names for the plans the revenue page charts (from the first part that answers). */
  planNames?: PlanNames | undefined;
};

/** What the dashboard knows that a section the caller adds may use. */
export type DashboardSectionHost = {
  clock: Clock;
  token: DisplayToken;
  /** From the first scheme part that answers it. */
  nextRenewal?: NextRenewal | undefined;
};

/**
 * A section the caller adds to the facilitator's dashboard (the agent operator's views, built by
 * `agentDashboard` in src/agent/dashboard/agentSection.ts), built once with what the dashboard knows.
 */
export type DashboardSectionFactory = (host: DashboardSectionHost) => DashboardSection;

/**
 * The agent operator's views and the token that signs in to them: `agentDashboard({ store, token })`
 * of src/agent/dashboard/agentSection.ts, so the facilitator never loads agent code itself.
 */
export type DashboardAgents = { token: string; section: DashboardSectionFactory };

// A section built outside the facilitator (the agent's views) is typed from here, with its factory.
export type { DashboardSection };
