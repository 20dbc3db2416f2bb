/**
 * What the demo runs on (agents/demo.ts): an anvil devnet, PGlite in memory, the facilitator with its
 * dashboard, the market, and a providers' webhook receiver; each registered for cleanup as it starts.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import pino, { type Logger } from "pino";
import { agentDashboard } from "../src/agent/dashboard/agentSection.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitator, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { verifyWebhook } from "../src/gate/verifyWebhook.ts";
import { serveMarket } from "../src/market/createMarket.ts";
import { base64UrlEncode } from "../src/protocol/base64.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createStore } from "../src/store/createStore.ts";
import type { Store } from "../src/store/store.ts";

/** What was started, stopped in reverse order at the end. */
export type Cleanups = (() => Promise<void>)[];

export type DemoServices = {
  devnet: Devnet;
  store: Store;
  logger: Logger;
  /** The facilitator's gas account, also its signer for the sellers. */
  gasAccount: Devnet["accounts"][number];
  facilitatorUrl: string;
  marketUrl: string;
  dashboardUrl: string;
  /** The agent operator's dashboard token. */
  dashboardToken: string;
};

/** Starts the devnet, the store, the facilitator (with its dashboard) and the market. */
export async function startServices(
  env: Record<string, string | undefined>,
  signal: AbortSignal | undefined,
  cleanups: Cleanups,
): Promise<DemoServices> {
  const devnet: Devnet = await startDevnet({ accounts: 10 });
  cleanups.push(() => devnet.stop());
  const store: Store = await createStore({ dataDir: "memory://" });
  cleanups.push(() => store.close());
  const logger = pino({ level: env.LOG_LEVEL ?? "silent" });
  const gasAccount = devnet.accounts[devnet.accounts.length - 1]!;
  const dashboardToken = base64UrlEncode(randomBytes(24));
  const facilitator = await createDemoFacilitator({ devnet, store, logger, gasAccount, dashboardToken });
  await facilitator.start();
  cleanups.push(() => facilitator.stop());
  const facilitatorServer = await serveApp(facilitator.app);
  cleanups.push(() => facilitatorServer.close());
  const market = await serveMarket({ store, clock: systemClock, logger });
  cleanups.push(() => market.close());
  const dashboardUrl = `${facilitatorServer.url}/dashboard`;
  // Its address is printed only once it answers, so the address shown is one that can be opened.
  await waitFor(signal, "the dashboard", async () => {
    const response = await fetch(`${dashboardUrl}/login`).catch(() => undefined);
    await response?.body?.cancel();
    return response?.ok === true ? true : undefined;
  });
  return {
    devnet,
    store,
    logger,
    gasAccount,
    facilitatorUrl: facilitatorServer.url,
    marketUrl: market.url,
    dashboardUrl,
    dashboardToken,
  };
}

async function createDemoFacilitator(parts: {
  devnet: Devnet;
  store: Store;
  logger: Logger;
  gasAccount: Devnet["accounts"][number];
  dashboardToken: string;
}) {
  const { devnet, store, logger, gasAccount, dashboardToken } = parts;
  const { createSubscriptionsModule } = await import("../src/facilitator/subscriptionsModule.ts");
  const { builtinModules } = await import("../src/facilitator/modules.ts");
  const { channelsModule } = await import("../src/schemes/channel/facilitator/channelsModule.ts");
  const { createWebhooksModule, webhooksModule } = await import(
    "../src/facilitator/webhooks/createWebhooksModule.ts"
  );
  // One sealing key for the webhooks module and the dashboard (which rotates secrets).
  const webhookKey = new Uint8Array(randomBytes(32));
  return createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: gasAccount.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    // Prepaid channels: opened gaslessly here, their vouchers claimed in batches (docs/channels.md).
    channels: devnet.contracts.channels,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    logger,
    // The keeper looks for due renewals every half second, so the month that passes shows at once.
    builtinModules: false,
    // The demo's webhook receiver is on this machine: loopback targets are allowed here, explicitly
    // (a facilitator refuses them by default).
    // The dashboard (docs/dashboard.md): providers sign in with their API key, the agent operator with
    // the token printed below; plan actions are sent with the sellers' devnet keys.
    webhooks: { secretKeys: [webhookKey] },
    dashboard: {
      agents: agentDashboard({ store, token: dashboardToken }),
      planSigner: (provider) => {
        const account = devnet.accounts.find((a) => a.address.toLowerCase() === provider.toLowerCase());
        return account === undefined ? undefined : devnet.walletClient(account);
      },
    },
    modules: [
      ...builtinModules.map((m) =>
        m === webhooksModule
          ? createWebhooksModule({ allowTargets: ["127.0.0.0/8", "::1"], secretKeys: [webhookKey] })
          : m,
      ),
      // The subscription, metered and channel schemes' facilitator parts, the keeper's interval set.
      createSubscriptionsModule({ keeper: { intervalMs: 500 } }),
      channelsModule,
    ],
  });
}

export type ReceivedEvent = { id: string; type: string; data: Record<string, unknown> };

/** A provider's webhook receiver: verifies each delivery's signature before accepting it. */
export async function startWebhookReceiver(
  secrets: () => string[],
): Promise<{ url: string; events: ReceivedEvent[]; close(): Promise<void> }> {
  const events: ReceivedEvent[] = [];
  const seen = new Set<string>();
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (c: Buffer) => chunks.push(c));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const headers = new Headers();
      for (const [k, v] of Object.entries(request.headers)) if (typeof v === "string") headers.set(k, v);
      const verified = secrets().some((secret) => {
        try {
          verifyWebhook(secret, headers, body, { clock: systemClock });
          return true;
        } catch {
          return false;
        }
      });
      if (!verified) {
        response.writeHead(400).end();
        return;
      }
      const event = JSON.parse(body) as ReceivedEvent;
      if (!seen.has(event.id)) {
        seen.add(event.id);
        events.push(event);
      }
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    events,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Polls `probe` until it gives a value, every 200 ms, for at most `timeoutMs`. */
export async function waitFor<T>(
  signal: AbortSignal | undefined,
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    signal?.throwIfAborted();
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
