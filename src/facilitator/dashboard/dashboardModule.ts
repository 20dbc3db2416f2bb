/**
 * The dashboard as a facilitator module (docs/dashboard.md): mounts `/dashboard` with the provider
 * views over this facilitator's store, and — when given an agent store and token — the agent
 * operator's views. Not in the built-in modules: `createFacilitator({ dashboard })` adds it, and
 * `tollgate facilitator` turns it on for a devnet on a loopback address (TOLLGATE_DASHBOARD).
 */
import { randomBytes as nodeRandomBytes } from "node:crypto";
import type { Address } from "viem";
import { agentSection } from "../../agent/dashboard/agentSection.ts";
import type { WriteClient } from "../../chain/clientTypes.ts";
import type { TokenBucketRule } from "../../http/tokenBucket.ts";
import { mountPlanViews } from "../../schemes/subscription/facilitator/planViews.ts";
import { findSubscription } from "../../schemes/subscription/facilitator/subscriptionRecords.ts";
import type { Store } from "../../store/store.ts";
import type { FacilitatorModuleFactory } from "../facilitatorModule.ts";
import { createWebhookRepository } from "../webhooks/createWebhookRepository.ts";
import { createWebhookSecretBox } from "../webhooks/webhookSecretBox.ts";
import { createDashboardApp, type DashboardSection } from "./dashboardApp.ts";
import type { DashboardSessionOptions } from "./dashboardSessions.ts";
import { providerSection } from "./providerSection.ts";
import { mountWebhookViews } from "./webhookViews.ts";

export type DashboardOptions = {
  /**
   * The keys that seal webhook secrets: the webhooks module's (createFacilitator passes them), so a
   * secret rotated here is one its worker can open.
   */
  webhookSecretKeys: readonly Uint8Array[];
  /** Sends the signed-in provider's plan transactions, when this dashboard may hold its key. */
  planSigner?: ((provider: Address) => WriteClient | undefined) | undefined;
  /** The agent operator's views: the agents' store and the token that signs in to them. */
  agents?: { store: Store; token: string } | undefined;
  publicOrigin?: string | undefined;
  secureCookies?: boolean | undefined;
  sessions?: DashboardSessionOptions | undefined;
  loginLimit?: TokenBucketRule | undefined;
  trustedProxies?: readonly string[] | undefined;
  /** How long plan actions wait for the index to show a mined change (default 15 s). */
  indexWaitMs?: number | undefined;
};

/** A factory for the dashboard module. */
export function createDashboardModule(options: DashboardOptions): FacilitatorModuleFactory {
  return (ctx) => {
    const first = ctx.tokens[0];
    if (first === undefined) throw new TypeError("the dashboard needs a token to show amounts in");
    const token = { address: first.address, decimals: first.decimals, symbol: first.symbol };
    const scope =
      ctx.subscriptionManager === undefined
        ? undefined
        : { chainId: ctx.chainId, manager: ctx.subscriptionManager };
    const repository = createWebhookRepository({
      store: ctx.store,
      randomBytes: (size) => new Uint8Array(nodeRandomBytes(size)),
      secrets: createWebhookSecretBox(options.webhookSecretKeys),
    });
    const sections: DashboardSection[] = [
      providerSection({ store: ctx.store, clock: ctx.clock, token, scope }, [
        mountWebhookViews({ repository, clock: ctx.clock }),
        mountPlanViews({
          store: ctx.store,
          scope,
          token,
          publicClient: ctx.publicClient,
          planSigner: options.planSigner,
          indexWaitMs: options.indexWaitMs,
        }),
      ]),
    ];
    if (options.agents !== undefined) {
      const agentStore = options.agents.store;
      sections.push(
        agentSection({
          store: (work) => work(agentStore),
          clock: ctx.clock,
          token,
          // Where the agents share this facilitator's deployment, its index knows the renewal dates.
          nextRenewal:
            scope === undefined
              ? undefined
              : async (manager, subscriptionId) => {
                  if (manager.toLowerCase() !== scope.manager.toLowerCase()) return undefined;
                  const row = await findSubscription(ctx.store, scope, subscriptionId);
                  return row === undefined || (row.status !== "Active" && row.status !== "PastDue")
                    ? undefined
                    : row.current_period_end;
                },
        }),
      );
    }
    const dashboard = createDashboardApp({
      sessionStore: ctx.store,
      providerKeys: ctx.store,
      agentToken: options.agents?.token,
      sections,
      clock: ctx.clock,
      logger: ctx.logger,
      publicOrigin: options.publicOrigin,
      secureCookies: options.secureCookies,
      sessions: options.sessions,
      loginLimit: options.loginLimit,
      trustedProxies: options.trustedProxies,
    });
    return {
      name: "dashboard",
      routes(app) {
        app.route("/dashboard", dashboard);
      },
    };
  };
}
