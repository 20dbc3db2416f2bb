/**
 * The dashboard as a facilitator module (docs/dashboard.md): mounts `/dashboard` with the provider
 * views over this facilitator's store, the pages the scheme parts contribute to them, and — when the
 * caller gives them with their token — the agent operator's views. Not in the built-in modules:
 * `createFacilitator({ dashboard })` adds it, and `tollgate facilitator` turns it on for a devnet on a
 * loopback address (TOLLGATE_DASHBOARD).
 */
import { randomBytes as nodeRandomBytes } from "node:crypto";
import type { Address } from "viem";
import type { WriteClient } from "../../chain/clientTypes.ts";
import type { TokenBucketRule } from "../../http/tokenBucket.ts";
import type { FacilitatorModuleFactory } from "../facilitatorModule.ts";
import { createWebhookRepository } from "../webhooks/createWebhookRepository.ts";
import { createWebhookSecretBox } from "../webhooks/webhookSecretBox.ts";
import { createDashboardApp, type DashboardSection } from "./dashboardApp.ts";
import type { DashboardSessionOptions } from "./dashboardSessions.ts";
import { providerSection } from "./providerSection.ts";
import type { DashboardAgents, SchemeDashboard } from "./schemeDashboard.ts";
import { mountWebhookViews } from "./webhookViews.ts";

export type { DashboardAgents } from "./schemeDashboard.ts";

export type DashboardOptions = {
  /**
   * The keys that seal webhook secrets: the webhooks module's (createFacilitator passes them), so a
   * secret rotated here is one its worker can open.
   */
  webhookSecretKeys: readonly Uint8Array[];
  /**
   * What the facilitator's scheme parts contribute, in their list order (createFacilitator passes
   * them).
   */
  schemes: readonly SchemeDashboard[];
  /** Sends the signed-in provider's plan transactions, when this dashboard may hold its key. */
  planSigner?: ((provider: Address) => WriteClient | undefined) | undefined;
  /** The agent operator's views. */
  agents?: DashboardAgents | undefined;
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
    const repository = createWebhookRepository({
      store: ctx.store,
      randomBytes: (size) => new Uint8Array(nodeRandomBytes(size)),
      secrets: createWebhookSecretBox(options.webhookSecretKeys),
    });
    const viewHost = {
      token,
      publicClient: ctx.publicClient,
      providerWallet: options.planSigner,
      indexWaitMs: options.indexWaitMs,
    };
    const sections: DashboardSection[] = [
      providerSection(
        {
          store: ctx.store,
          clock: ctx.clock,
          token,
          planNames: options.schemes.find((scheme) => scheme.planNames !== undefined)?.planNames,
        },
        [
          mountWebhookViews({ repository, clock: ctx.clock, store: ctx.store }),
          ...options.schemes.flatMap((scheme) => scheme.providerViews?.(viewHost) ?? []),
        ],
      ),
    ];
    if (options.agents !== undefined) {
      sections.push(
        options.agents.section({
          clock: ctx.clock,
          token,
          // Where the agents share this facilitator's deployment, its index knows the renewal dates.
          nextRenewal: options.schemes.find((scheme) => scheme.nextRenewal !== undefined)?.nextRenewal,
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
