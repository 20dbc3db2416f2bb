/**
 * A channel payer whose request got no answer (the gate was down: connection refused) does not pay for
 * it: the next voucher covers only the requests the gate served, so what the seller can claim is what
 * was served. Found by the fault suite (docs/reliability.md): with a gate SIGKILLed and restarted now
 * and then, every refused connection raised the payer's running total by one price.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { type Facilitator, type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createFacilitatorClient, type FetchFn } from "../src/http/facilitatorClient.ts";
import { createChannelFetch } from "../src/schemes/channel/client/channelFetch.ts";
import { createChannelWallet } from "../src/schemes/channel/client/channelWallet.ts";
import { withChannelWallet } from "../src/schemes/channel/client.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  startChannelFacilitator,
} from "./support/channelFixtures.ts";

const PRICE = 10_000n;

/** A loopback port nothing listens on (bound, read, released). */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 1));
    });
  });
}

describe("a channel request that got no answer", () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let apiKey: string;
  const dir = mkdtempSync(join(tmpdir(), "tollgate-channel-unanswered-"));

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    [, payer, payee] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
    const gas = devnet.accounts[5]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: { minDeposit: 100_000n },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const client of ["createChannelFetch", "fetchWithPayment"] as const)
    it(`is not paid for (${client}): after 5 served, 3 refused connections and 5 served, the payer signed 10 prices`, async () => {
      const gate = paymentGate({
        payTo: payee.address,
        network: devnet.network,
        token: {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
        },
        facilitator: server.url,
        providerApiKey: apiKey,
        memoSecret: "an-unanswered-test-memo-secret-at-least-32-bytes",
        routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
        schemeOptions: {
          channel: {
            contract: devnet.contracts.channels,
            journal: join(dir, `${client}.journal`),
            forwardIntervalMs: 3_600_000,
          },
        },
      });
      const app = new Hono<PaymentGateEnv>();
      app.use("/api/*", honoPaymentGate(gate));
      app.get("/api/item", (c) => c.json({ item: 1 }));
      const api = await serveApp(app);
      // The gate is "down" for some requests: they go to a port nothing listens on (a real ECONNREFUSED).
      const down = `http://127.0.0.1:${await closedPort()}`;
      let gateDown = false;
      const network: FetchFn = (input, init) =>
        fetch(gateDown ? String(input).replace(api.url, down) : input, init);
      try {
        const wallet = createChannelWallet({
          account: payer.account,
          network: devnet.network,
          facilitator: createFacilitatorClient({ url: server.url, fetch }),
          calls: 50,
        });
        const paidFetch =
          client === "createChannelFetch"
            ? createChannelFetch(network, { wallet, maxPrice: PRICE })
            : fetchWithPayment(
                network,
                withChannelWallet(
                  createPayer({
                    account: payer.account,
                    network: devnet.network,
                    facilitator: server.url,
                    fetch,
                  }),
                  wallet,
                ),
                { maxPrice: PRICE },
              );
        const served = async (n: number) => {
          for (let i = 0; i < n; i++) expect((await paidFetch(`${api.url}/api/item`)).status).toBe(200);
        };
        await served(5);
        gateDown = true;
        for (let i = 0; i < 3; i++) await expect(paidFetch(`${api.url}/api/item`)).rejects.toThrow();
        gateDown = false;
        await served(5);

        // The highest voucher the payer signed is the most the seller can claim: 10 served, 10 prices.
        const [channel] = wallet.channels();
        expect({ signed: channel!.signed, owed: channel!.owed }).toEqual({
          signed: 10n * PRICE,
          owed: 10n * PRICE,
        });
      } finally {
        await api.close();
        await gate.close();
      }
    }, 60_000);
});
