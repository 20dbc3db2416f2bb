/**
 * The channel scheme end to end over a devnet: a payer opens a channel through the facilitator
 * (gasless), pays 100 requests to a gate with vouchers (one HTTP exchange each after the first), the
 * gate hands the vouchers to the facilitator on shutdown, the facilitator claims them on chain, and a
 * cooperative close returns the rest of the deposit to the payer.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { type Address, sha256, toHex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { tollgateChannelsAbi } from "../src/chain/contracts/artifacts/TollgateChannels.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { type Facilitator, type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createFacilitatorClient, type FetchFn } from "../src/http/facilitatorClient.ts";
import { ChannelCloseResponseSchema } from "../src/protocol/channels.ts";
import {
  CHANNEL_VOUCHER_HEADER,
  channelVoucherMessage,
  parseChannelVoucher,
} from "../src/protocol/channelVoucher.ts";
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
const CALLS = 100;

describe("channel scheme end to end", () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let gas: DevnetAccount;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let apiKey: string;
  const dir = mkdtempSync(join(tmpdir(), "tollgate-channel-e2e-"));

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    [, payer, payee] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
    gas = devnet.accounts[5]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: {
        claims: { thresholdValue: 1n, maxAgeMs: 3_600_000, intervalMs: 100 },
        minDeposit: 100_000n,
      },
      outbox: { reconcileIntervalMs: 100 },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  });
  afterAll(async () => {
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const balance = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

  async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 20_000): Promise<T> {
    const end = Date.now() + ms;
    for (;;) {
      const value = await read();
      if (done(value)) return value;
      if (Date.now() > end) return value;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  it("opens, pays 100 calls in 101 exchanges, signs vouchers the contract verifies, forwards, claims 100 × price and refunds the rest on a cooperative close", async () => {
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
      memoSecret: "an-end-to-end-memo-secret-at-least-32-bytes",
      routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
      schemeOptions: {
        channel: {
          contract: devnet.contracts.channels,
          journal: join(dir, "vouchers.journal"),
          // Forwarded on shutdown here; the interval is not what this test shows.
          forwardIntervalMs: 3_600_000,
        },
      },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => c.json({ item: 1, paidWith: c.get("payment")?.scheme }));
    const api = await serveApp(app);
    try {
      let exchanges = 0;
      let withVoucher = 0;
      const counting: FetchFn = (input, init) => {
        exchanges++;
        if (new Headers(init?.headers).has(CHANNEL_VOUCHER_HEADER)) withVoucher++;
        return fetch(input, init);
      };
      const wallet = createChannelWallet({
        account: payer.account,
        network: devnet.network,
        facilitator: createFacilitatorClient({ url: server.url, fetch }),
        calls: 150,
      });
      const paidFetch = createChannelFetch(counting, { wallet, maxPrice: PRICE });
      const payerBefore = await balance(payer.address);
      const payeeBefore = await balance(payee.address);

      for (let i = 0; i < CALLS; i++) {
        const response = await paidFetch(`${api.url}/api/item`);
        expect(response.status).toBe(200);
        expect(await response.json()).toEqual({ item: 1, paidWith: "channel" });
      }
      expect(exchanges).toBe(CALLS + 1); // the first call's 402, then one exchange per paid call
      expect(withVoucher).toBe(CALLS);
      const [channel] = wallet.channels();
      expect(channel).toMatchObject({ status: "open", deposit: 150n * PRICE, signed: 100n * PRICE });
      expect(await balance(payer.address)).toBe(payerBefore - 150n * PRICE);

      // The contract accepts what the payer's TypeScript signed: the same digest, a valid P-256 voucher.
      const next = wallet.payNow({
        network: devnet.network,
        contract: devnet.contracts.channels,
        facilitator: server.url,
        payee: payee.address,
        token: devnet.contracts.usd,
        price: PRICE,
        minDeposit: 0n,
        minCloseDelay: 0,
        tag: channel!.tag,
      })!;
      const voucher = parseChannelVoucher(next.header);
      expect(voucher.cumulativeAmount).toBe(101n * PRICE);
      const read = (functionName: "voucherDigest" | "isValidVoucher", args: readonly unknown[]) =>
        devnet.publicClient.readContract({
          address: devnet.contracts.channels,
          abi: tollgateChannelsAbi,
          functionName,
          args: args as never,
        });
      expect(await read("voucherDigest", [channel!.channelId, voucher.cumulativeAmount])).toBe(
        sha256(
          channelVoucherMessage(
            { chainId: devnet.chain.id, channels: devnet.contracts.channels },
            channel!.channelId,
            voucher.cumulativeAmount,
          ),
        ),
      );
      expect(
        await read("isValidVoucher", [
          channel!.channelId,
          voucher.cumulativeAmount,
          toHex(voucher.signature),
        ]),
      ).toBe(true);
      expect(
        await read("isValidVoucher", [
          channel!.channelId,
          voucher.cumulativeAmount + 1n,
          toHex(voucher.signature),
        ]),
      ).toBe(false);
      wallet.settle(next, 402, null); // never sent: its price is credit again

      // Shutdown forwards the vouchers; the facilitator claims them in one batch.
      await gate.close();
      const onChain = await until(
        () =>
          readChannel(devnet.publicClient, {
            channels: devnet.contracts.channels,
            channelId: channel!.channelId,
          }),
        (c) => c.claimed === 100n * PRICE,
      );
      expect(onChain.claimed).toBe(100n * PRICE);
      expect(await balance(payee.address)).toBe(payeeBefore + 100n * PRICE);

      const close = await fetch(`${server.url}/channels/${channel!.channelId}/close`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}` },
      });
      expect([200, 202]).toContain(close.status);
      ChannelCloseResponseSchema.parse(await close.json());
      const closed = await until(
        () =>
          readChannel(devnet.publicClient, {
            channels: devnet.contracts.channels,
            channelId: channel!.channelId,
          }),
        (c) => c.closed,
      );
      expect(closed.closed).toBe(true);
      expect(await balance(payer.address)).toBe(payerBefore - 100n * PRICE);
      expect(await balance(payee.address)).toBe(payeeBefore + 100n * PRICE);
    } finally {
      await api.close();
      await gate.close();
    }
  }, 60_000);

  it("fetchWithPayment pays a channel option through the scheme registry and then up front: 10 calls in 11 exchanges", async () => {
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
      memoSecret: "an-end-to-end-memo-secret-at-least-32-bytes",
      routes: {
        "GET /api/item": {
          pricing: [
            { type: "one-time", amount: 2n * PRICE },
            { type: "channel", amount: PRICE },
          ],
        },
      },
      schemeOptions: {
        channel: { contract: devnet.contracts.channels, journal: join(dir, "registry.journal") },
      },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => c.json({ paidWith: c.get("payment")?.scheme }));
    const api = await serveApp(app);
    try {
      let exchanges = 0;
      const counting: FetchFn = (input, init) => {
        exchanges++;
        return fetch(input, init);
      };
      const wallet = createChannelWallet({
        account: payer.account,
        network: devnet.network,
        facilitator: createFacilitatorClient({ url: server.url, fetch }),
        calls: 50,
      });
      const payer2 = withChannelWallet(
        createPayer({ account: payer.account, network: devnet.network, facilitator: server.url, fetch }),
        wallet,
      );
      const paidFetch = fetchWithPayment(counting, payer2, { maxPrice: 2n * PRICE });
      for (let i = 0; i < 10; i++) {
        const response = await paidFetch(`${api.url}/api/item`);
        expect(response.status).toBe(200);
        expect(await response.json()).toEqual({ paidWith: "channel" });
      }
      expect(exchanges).toBe(11);
      expect(wallet.channels()).toMatchObject([{ status: "open", signed: 10n * PRICE, owed: 10n * PRICE }]);
    } finally {
      await api.close();
      await gate.close();
    }
  }, 60_000);
});
