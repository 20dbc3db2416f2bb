/**
 * A payer's cooperative close over a devnet (docs/channels.md, "Cooperative close"): the payer asks to
 * close (its signed RequestClose, relayed on chain), then asks the seller's gate; the gate seals the
 * channel, hands the last voucher it served for to the facilitator and has it close with that voucher,
 * so the seller gets every request it served and the payer the rest at once — not after the close delay.
 * And the misuses: a close nobody signed, another seller's channel, a malformed id, a replay, a voucher
 * shown after the seal.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import type { Address, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { type Facilitator, type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { CHANNEL_VOUCHER_HEADER } from "../src/protocol/channelVoucher.ts";
import { CHANNEL_CLOSE_HEADER } from "../src/schemes/channel/channelHeaders.ts";
import { createChannelFetch } from "../src/schemes/channel/client/channelFetch.ts";
import { type ChannelTermsInput, createChannelWallet } from "../src/schemes/channel/client/channelWallet.ts";
import { createMemoryChannelWalletStore } from "../src/schemes/channel/client/channelWalletStore.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  startChannelFacilitator,
} from "./support/channelFixtures.ts";

const PRICE = 10_000n;

describe("cooperative channel close at the payer's request", () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let gas: DevnetAccount;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let otherPayee: DevnetAccount;
  let apiKey: string;
  let otherApiKey: string;
  const dir = mkdtempSync(join(tmpdir(), "tollgate-channel-coop-"));
  const servers: { close(): Promise<void> }[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    [, payer, payee, otherPayee] = devnet.accounts as [
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
    ];
    gas = devnet.accounts[5]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      // A high threshold: nothing is claimed before the close, so the close itself pays the seller.
      channels: {
        claims: { thresholdValue: 10n ** 18n, maxAgeMs: 3_600_000, intervalMs: 100 },
        minDeposit: 100_000n,
      },
      outbox: { reconcileIntervalMs: 100 },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    otherApiKey = await registerTestProvider(server.url, otherPayee);
    for (const seller of [payee, otherPayee]) {
      await nameChannelOperator(devnet, seller, gas.address);
    }
  }, 120_000);
  afterAll(async () => {
    for (const s of servers) await s.close();
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const balance = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const chainChannel = (channelId: Hex) =>
    readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });

  /** A seller's gate selling `GET /api/item` by channel, its vouchers never forwarded on an interval. */
  async function startSeller(seller: DevnetAccount, key: string | undefined, name: string) {
    const gate = paymentGate({
      payTo: seller.address,
      network: devnet.network,
      token: {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
      },
      facilitator: server.url,
      ...(key === undefined ? {} : { providerApiKey: key }),
      memoSecret: "a-cooperative-close-memo-secret-of-32-bytes",
      routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
      schemeOptions: {
        channel: {
          contract: devnet.contracts.channels,
          journal: join(dir, `${name}.journal`),
          // Not forwarded before the close: the close must carry the gate's own last voucher.
          forwardIntervalMs: 3_600_000,
        },
      },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => c.json({ item: 1 }));
    const api = await serveApp(app);
    servers.push(api, { close: () => gate.close() });
    return { gate, url: `${api.url}/api/item` };
  }

  function newWallet() {
    const walletStore = createMemoryChannelWalletStore();
    const wallet = createChannelWallet({
      account: payer.account,
      network: devnet.network,
      facilitator: createFacilitatorClient({ url: server.url, fetch }),
      calls: 50,
      store: walletStore,
      fetch,
    });
    return { wallet, walletStore, paidFetch: createChannelFetch(fetch, { wallet, maxPrice: PRICE }) };
  }

  const termsOf = (seller: DevnetAccount, tag: Hex | undefined): ChannelTermsInput => ({
    network: devnet.network,
    contract: devnet.contracts.channels,
    facilitator: server.url,
    payee: seller.address,
    token: devnet.contracts.usd,
    price: PRICE,
    minDeposit: 0n,
    minCloseDelay: 0,
    tag,
  });

  const askGate = (url: string, channelId: string) =>
    fetch(url, { headers: { [CHANNEL_CLOSE_HEADER]: channelId } });

  it("claims the seller's last voucher (never forwarded before) and refunds the rest at once; a replay sends nothing and a voucher shown after the seal is refused", async () => {
    const seller = await startSeller(payee, apiKey, "seller");
    const { wallet, walletStore, paidFetch } = newWallet();
    const payerBefore = await balance(payer.address);
    const payeeBefore = await balance(payee.address);
    for (let i = 0; i < 7; i++) expect((await paidFetch(seller.url)).status).toBe(200);
    const [channel] = wallet.channels();
    const channelId = channel!.channelId;
    expect(channel).toMatchObject({ deposit: 50n * PRICE, signed: 7n * PRICE });
    // A voucher signed but not yet shown: it must not be served once the close began.
    const unsent = wallet.payNow(termsOf(payee, channel!.tag))!;
    expect(await balance(payer.address)).toBe(payerBefore - 50n * PRICE);

    const outcome = await wallet.requestClose(channelId);
    expect(outcome.closeRequestedAt).toBeGreaterThan(0);
    expect(outcome.cooperativeError).toBeUndefined();
    expect(outcome.cooperative).toMatchObject({
      channelId,
      status: "closed",
      claimed: (7n * PRICE).toString(),
      refunded: (43n * PRICE).toString(),
    });
    // Closed now, although the close delay is an hour: the seller got what it served, the payer the rest.
    expect(await chainChannel(channelId)).toMatchObject({ closed: true, claimed: 7n * PRICE });
    expect(await balance(payee.address)).toBe(payeeBefore + 7n * PRICE);
    expect(await balance(payer.address)).toBe(payerBefore - 7n * PRICE);
    expect(walletStore.load().find((r) => r.channelId === channelId)?.status).toBe("closed");

    // The voucher signed before the close is refused: the gate sealed the channel.
    const late = await fetch(seller.url, { headers: { [CHANNEL_VOUCHER_HEADER]: unsent.header } });
    expect(late.status).toBe(402);
    expect(((await late.json()) as { error: string }).error).toBe("ChannelClosing");

    // A replay (by anyone) answers the outcome from the chain and sends no transaction.
    const sentBefore = await devnet.publicClient.getTransactionCount({ address: gas.address });
    const replay = await askGate(seller.url, channelId);
    expect(replay.status).toBe(200);
    expect(await replay.json()).toMatchObject({ status: "closed", claimed: (7n * PRICE).toString() });
    expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(sentBefore);
    expect(await balance(payee.address)).toBe(payeeBefore + 7n * PRICE);
  }, 120_000);

  it("refuses a close the payer did not ask for, another seller's channel and a malformed id, sealing nothing", async () => {
    const seller = await startSeller(payee, apiKey, "seller-2");
    const other = await startSeller(otherPayee, otherApiKey, "other");
    const { wallet, paidFetch } = newWallet();
    expect((await paidFetch(seller.url)).status).toBe(200);
    const channelId = wallet.channels()[0]!.channelId;

    // Nobody signed a close request: refused, and the channel goes on serving.
    const unasked = await askGate(seller.url, channelId);
    expect(unasked.status).toBe(400);
    expect(((await unasked.json()) as { error: { code: string } }).error.code).toBe("InvalidRequest");
    expect((await paidFetch(seller.url)).status).toBe(200);
    // Another seller's gate knows nothing of it; a malformed id is a clear 400.
    expect((await askGate(other.url, channelId)).status).toBe(404);
    expect((await askGate(seller.url, "0x1234")).status).toBe(400);
    expect((await chainChannel(channelId)).closed).toBe(false);

    // Once the payer asked, a stranger's request for the close only does what the payer signed for.
    await wallet.requestClose(channelId, { cooperative: false });
    expect((await chainChannel(channelId)).closed).toBe(false);
    const byStranger = await askGate(seller.url, channelId);
    expect(byStranger.status).toBe(200);
    expect(await chainChannel(channelId)).toMatchObject({ closed: true, claimed: 2n * PRICE });
  }, 120_000);

  it("leaves the close to the delay when the seller's gate cannot close (no provider key), sealing nothing", async () => {
    const seller = await startSeller(payee, undefined, "keyless");
    const { wallet, paidFetch } = newWallet();
    expect((await paidFetch(seller.url)).status).toBe(200);
    const channelId = wallet.channels()[0]!.channelId;
    const outcome = await wallet.requestClose(channelId);
    expect(outcome.cooperative).toBeUndefined();
    expect(outcome.cooperativeError).toMatch(/providerApiKey/);
    expect(await chainChannel(channelId)).toMatchObject({ closed: false });
    expect((await chainChannel(channelId)).closeRequestedAt).toBeGreaterThan(0n);
  }, 120_000);
});
