/**
 * Two gates of one seller must not both serve one voucher's value (docs/security.md, "The second review"). Each gate on its own journal (the default store) cannot see what the other charged, so a
 * channel is served only by the gates of the voucher store it was opened for: the store's tag, offered
 * in the 402, is the first 8 bytes of the channel's salt, which the contract keeps. Gates sharing one
 * PostgreSQL store share its tag and so its channels, each voucher still served once across them.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../../src/chain/actions/channels/readChannel.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { type Facilitator, type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";
import { createFacilitatorClient, type FetchFn } from "../../src/http/facilitatorClient.ts";
import { CHANNEL_VOUCHER_HEADER } from "../../src/protocol/channelVoucher.ts";
import { PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { channelTermsOf } from "../../src/schemes/channel/channelTerms.ts";
import { createChannelFetch } from "../../src/schemes/channel/client/channelFetch.ts";
import { createChannelWallet } from "../../src/schemes/channel/client/channelWallet.ts";
import { createPostgresVoucherStore } from "../../src/schemes/channel/gate/postgresVoucherStore.ts";
import type { VoucherStore } from "../../src/schemes/channel/gate/voucherStore.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import { startChannelFacilitator } from "../support/channelFixtures.ts";

const PRICE = 10_000n;
const CALLS = 10;

describe("one voucher, one gate", { timeout: 120_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let payee: DevnetAccount;
  let payers: DevnetAccount[];
  const dir = mkdtempSync(join(tmpdir(), "tollgate-two-gates-"));
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    payee = devnet.accounts[2]!;
    payers = [devnet.accounts[1]!, devnet.accounts[3]!, devnet.accounts[4]!];
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas: devnet.accounts[5]!,
      channels: { claims: false, minDeposit: 100_000n },
    }));
  });
  afterAll(async () => {
    for (const close of closers.reverse()) await close();
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A gate of the seller: its own journal unless given a store; counts the requests its handler served. */
  async function startGate(name: string, voucherStore?: VoucherStore) {
    const gate = paymentGate({
      payTo: payee.address,
      network: devnet.network,
      token: {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
      },
      facilitator: server.url,
      memoSecret: "a-two-gates-memo-secret-of-at-least-32-bytes",
      routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
      schemeOptions: {
        channel: {
          contract: devnet.contracts.channels,
          ...(voucherStore === undefined
            ? { journal: join(dir, `${name}.journal`) }
            : { store: voucherStore }),
        },
      },
    });
    const served = { count: 0 };
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => {
      served.count++;
      return c.json({ item: 1 });
    });
    const api = await serveApp(app);
    closers.push(async () => {
      await api.close();
      await gate.close();
    });
    return { url: `${api.url}/api/item`, served };
  }

  /** A payer's channel wallet and paying fetch; `sent` holds every voucher header it sent. */
  function payerOf(account: DevnetAccount) {
    const wallet = createChannelWallet({
      account: account.account,
      network: devnet.network,
      facilitator: createFacilitatorClient({ url: server.url, fetch }),
      calls: 50,
    });
    const sent: string[] = [];
    const recording: FetchFn = (input, init) => {
      const voucher = new Headers(init?.headers).get(CHANNEL_VOUCHER_HEADER);
      if (voucher !== null) sent.push(voucher);
      return fetch(input, init);
    };
    return { wallet, sent, paidFetch: createChannelFetch(recording, { wallet, maxPrice: PRICE }) };
  }

  const tagOffered = async (url: string) => {
    const body = PaymentRequiredSchema.parse(await (await fetch(url)).json());
    return channelTermsOf(body.accepts.find((o) => o.scheme === "channel")!)?.tag;
  };

  it("refuses at a second gate on its own journal every voucher a payer paid the first with: 10 vouchers serve 10 requests, not 20", async () => {
    const a = await startGate("a");
    const b = await startGate("b");
    const { wallet, sent, paidFetch } = payerOf(payers[0]!);
    for (let i = 0; i < CALLS; i++) expect((await paidFetch(a.url)).status).toBe(200);
    expect(sent).toHaveLength(CALLS);

    for (const voucher of sent) {
      const response = await fetch(b.url, { headers: { [CHANNEL_VOUCHER_HEADER]: voucher } });
      expect(response.status).toBe(402);
      expect(await response.json()).toMatchObject({
        error: "ChannelVoucherInvalid",
        message: "the channel was opened for another gate",
      });
    }
    expect(a.served.count).toBe(CALLS);
    expect(b.served.count).toBe(0);
    // Served value = signed value: every voucher's value was served once.
    const [channel] = wallet.channels();
    expect(channel!.signed).toBe(BigInt(a.served.count + b.served.count) * PRICE);
    // The channel carries gate A's tag on chain, not B's.
    const onChain = await readChannel(devnet.publicClient, {
      channels: devnet.contracts.channels,
      channelId: channel!.channelId,
    });
    expect(onChain.tag).toBe(await tagOffered(a.url));
    expect(await tagOffered(b.url)).not.toBe(onChain.tag);
  });

  it("gives an honest payer of both gates a channel for each, every voucher's value served once", async () => {
    const a = await startGate("honest-a");
    const b = await startGate("honest-b");
    const { wallet, paidFetch } = payerOf(payers[1]!);
    for (let i = 0; i < CALLS; i++) expect((await paidFetch(i % 2 === 0 ? a.url : b.url)).status).toBe(200);
    const channels = wallet.channels();
    expect(channels).toHaveLength(2);
    expect(new Set(channels.map((c) => c.tag))).toEqual(
      new Set([await tagOffered(a.url), await tagOffered(b.url)]),
    );
    expect(a.served.count + b.served.count).toBe(CALLS);
    expect(channels.reduce((sum, c) => sum + c.signed, 0n)).toBe(BigInt(CALLS) * PRICE);
  });

  it("lets gates sharing one PostgreSQL store share a channel, each voucher served once across them", async () => {
    const shared = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    closers.push(() => shared.close());
    const a = await startGate("shared-a", createPostgresVoucherStore(shared));
    const b = await startGate("shared-b", createPostgresVoucherStore(shared));
    expect(await tagOffered(a.url)).toBe(await tagOffered(b.url));
    const { wallet, sent, paidFetch } = payerOf(payers[2]!);
    for (let i = 0; i < CALLS; i++) expect((await paidFetch(i % 2 === 0 ? a.url : b.url)).status).toBe(200);
    expect(wallet.channels()).toHaveLength(1);
    // Each voucher replayed at the gate it was not shown to: its value was spent, so it is stale.
    for (const [i, voucher] of sent.entries()) {
      const other = i % 2 === 0 ? b.url : a.url;
      const response = await fetch(other, { headers: { [CHANNEL_VOUCHER_HEADER]: voucher } });
      expect(response.status).toBe(402);
      expect(await response.json()).toMatchObject({ error: "ChannelVoucherStale" });
    }
    expect(a.served.count + b.served.count).toBe(CALLS);
    expect(wallet.channels()[0]!.signed).toBe(BigInt(CALLS) * PRICE);
  });
});
