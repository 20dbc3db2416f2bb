/**
 * The facilitator of `tollgate up`: configured as `tollgate facilitator` configures itself on a devnet
 * (everything from `<dir>/devnet.json`, the proof key and the webhook key generated once into `<dir>`,
 * PGlite in `<dir>/pglite`), with one dashboard at `/dashboard` that holds both the providers' views and
 * the agent operator's views over the agent store in `<dir>/agents`.
 */
import { createPublicClient } from "viem";
import { agentSection } from "../agent/dashboard/agentSection.ts";
import { rpcTransport } from "../chain/rpcTransport.ts";
import { createFacilitator, type RunningServer, serveApp } from "../facilitator/createFacilitator.ts";
import { createLogger } from "../facilitator/createLogger.ts";
import type { DashboardAgents } from "../facilitator/dashboard/schemeDashboard.ts";
import { loadFacilitatorConfig, resolveTokenDomain } from "../facilitator/facilitatorConfig.ts";
import { createStore } from "../store/createStore.ts";
import { dashboardOptions, facilitatorSettings } from "./commands/facilitator.ts";
import { openAgentStore } from "./openAgentStore.ts";

export type UpFacilitator = { url: string; stop(): Promise<void> };

/**
 * Starts the facilitator over the devnet described in `env.TOLLGATE_DIR`, listening on `env.TOLLGATE_PORT`;
 * the agent operator signs in to its dashboard with `agentToken`.
 */
export async function startUpFacilitator(
  env: Record<string, string | undefined>,
  agentToken: string,
): Promise<UpFacilitator> {
  const config = loadFacilitatorConfig(env);
  const token = await resolveTokenDomain(
    config.token,
    createPublicClient({ transport: rpcTransport(config.rpcUrls) }),
  );
  const logger = createLogger({ level: config.logLevel, name: "facilitator" });
  const store = await createStore({ dataDir: config.dataDir, logger });
  const facilitator = createFacilitator({
    ...facilitatorSettings(config),
    store,
    tokens: [token],
    logger,
    dashboard: { ...dashboardOptions("on", config), agents: agentViews(config.dir, agentToken) },
  });
  let server: RunningServer;
  try {
    await facilitator.start();
    server = await serveApp(facilitator.app, { port: config.port, hostname: config.host });
  } catch (error) {
    await facilitator.stop();
    await store.close();
    throw error;
  }
  return {
    url: server.url,
    stop: async () => {
      await server.close();
      await facilitator.stop();
      await store.close();
    },
  };
}

/**
 * The agent operator's views over `<dir>/agents`, the store `tollgate run` and `tollgate budget` use:
 * opened for each page view and closed after it, since a PGlite directory opens in one process at a
 * time and holding it would stall them.
 */
function agentViews(dir: string, token: string): DashboardAgents {
  return {
    token,
    section: (host) =>
      agentSection({
        store: async (work) => {
          const store = await openAgentStore({ databaseUrl: undefined, dir, waitMs: 10_000 });
          try {
            return await work(store);
          } finally {
            await store.close();
          }
        },
        clock: host.clock,
        token: host.token,
        nextRenewal: host.nextRenewal,
      }),
  };
}
