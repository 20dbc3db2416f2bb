/**
 * The channel claim worker looks again as soon as a claim's outcome is recorded: a voucher the payee
 * handed over while the channel's claim was in flight is claimed then, not at the next backstop read
 * (30 s). A payer that asked to close waits for that claim before it may withdraw, and a seller's
 * cooperative close waits for it too.
 *
 * The facilitator reads the chain through a custom transport, so no chain watch wakes the worker (as
 * on an RPC without WebSocket and a chain without a known block time): only the worker's own signals
 * can. The claim is held in the mempool (automine off) while the second voucher arrives.
 */
import { createPublicClient, custom, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { signChannelCloseRequest } from "../src/chain/actions/channels/signChannelCloseRequest.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../src/facilitator/createFacilitator.ts";
import { ChannelVouchersResponseSchema } from "../src/protocol/channels.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  signTestOpen,
  startChannelFacilitator,
  wireVoucher,
} from "./support/channelFixtures.ts";

describe("channel claim worker wake-up after an outcome", { timeout: 60_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let apiKey: string;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 4 });
    [, payer, payee] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
    const gas = devnet.accounts[3]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const publicClient = createPublicClient({
      chain: devnet.chain,
      transport: custom({ request: (args) => devnet.publicClient.request(args as never) }),
      pollingInterval: 50,
    });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      publicClient: publicClient as typeof devnet.publicClient,
      // The default backstop (30 s): only a wake-up can make the second claim prompt.
      channels: {
        claims: { thresholdValue: 1_000_000n, maxAgeMs: 3_600_000, operatorCacheMs: 0 },
        minDeposit: 100_000n,
      },
      outbox: { reconcileIntervalMs: 50 },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  }, 60_000);

  afterAll(async () => {
    await devnet?.testClient.setAutomine(true).catch(() => undefined);
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
  const chainState = (channelId: Hex) =>
    readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });
  const claimRow = async (channelId: Hex) =>
    (
      await store.query<{ claim_outbox_id: string | null; status: string | null }>(
        `SELECT c.claim_outbox_id::text AS claim_outbox_id, o.status
         FROM channels c LEFT JOIN tx_outbox o ON o.id = c.claim_outbox_id WHERE c.channel_id = $1`,
        [channelId.toLowerCase()],
      )
    )[0];

  it("claims a voucher that arrived while the channel's claim was in flight as soon as that claim's outcome is recorded", async () => {
    const s = await signTestOpen(devnet, payer, payee.address, { amount: 2_000_000n });
    expect((await post("/channels", s.body)).status).toBe(201);
    const hand = async (amount: bigint) => {
      const response = await post(
        "/channels/vouchers",
        { vouchers: [wireVoucher(devnet, s.key, s.channelId, amount)] },
        { authorization: `Bearer ${apiKey}` },
      );
      expect(ChannelVouchersResponseSchema.parse(await response.json()).results[0]?.status).toBe("stored");
    };
    // Below the threshold and young: nothing is claimed until the payer asks to close.
    await hand(30_000n);

    await devnet.testClient.setAutomine(false);
    const deadline = (await devnet.publicClient.getBlock()).timestamp + 600n;
    const signature = await signChannelCloseRequest(payer.account, {
      chainId: devnet.chain.id,
      channels: devnet.contracts.channels,
      channelId: s.channelId,
      deadline,
    });
    const asked = post(`/channels/${s.channelId}/close-request`, {
      deadline: deadline.toString(),
      signature,
    });
    // Mine the relayed close request (and nothing else) once it is in the mempool.
    await expect
      .poll(async () => (await devnet.testClient.getTxpoolContent()).pending, { timeout: 20_000 })
      .not.toEqual({});
    await devnet.mine(1);
    expect((await asked).status).toBe(200);

    // The close request makes the 30 000 voucher's claim urgent: it is broadcast and waits in the mempool.
    await expect
      .poll(async () => (await claimRow(s.channelId))?.status, { timeout: 20_000 })
      .toBe("broadcast");
    // Meanwhile the seller serves more and hands the newer voucher over: the worker skips the channel
    // (its claim is in flight).
    await hand(50_000n);
    await devnet.testClient.setAutomine(true);
    await devnet.mine(1);
    await expect
      .poll(async () => (await chainState(s.channelId)).claimed, { timeout: 20_000 })
      .toBeGreaterThan(0n);
    // Claimed at once after the first claim's outcome (15 s of margin for a loaded machine), before the
    // worker's 30 s backstop read, which alone would claim it on the old code.
    await expect.poll(async () => (await chainState(s.channelId)).claimed, { timeout: 15_000 }).toBe(50_000n);
  });
});
