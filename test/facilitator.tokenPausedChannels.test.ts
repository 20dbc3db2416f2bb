/**
 * Channel claims while USDC is paused by its pauser: a voucher due for claiming stays in the table (a
 * claim would move no money), nothing is sent, and the claim goes out once the token is unpaused. The
 * worker's rounds are driven by hand, so each one is known to have run.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { pauseToken } from "../src/chain/actions/usdc/pauseToken.ts";
import { unpauseToken } from "../src/chain/actions/usdc/unpauseToken.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../src/facilitator/createFacilitator.ts";
import { ChannelVouchersResponseSchema } from "../src/protocol/channels.ts";
import { createChannelClaimWorker } from "../src/schemes/channel/facilitator/channelClaimWorker.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  signTestOpen,
  startChannelFacilitator,
  wireVoucher,
} from "./support/channelFixtures.ts";

describe("channel claims while USDC is paused", { timeout: 60_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let gas: DevnetAccount;
  let apiKey: string;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 4 });
    [, payer, payee, gas] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount, DevnetAccount];
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    // No claim worker of the facilitator's own: the test runs one and drives its rounds.
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: { claims: false, minDeposit: 100_000n },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  }, 60_000);

  afterAll(async () => {
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
  const setPaused = async (paused: boolean) => {
    const wallet = devnet.walletClient(devnet.deployer);
    const token = devnet.contracts.usd;
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await (paused ? pauseToken(wallet, { token }) : unpauseToken(wallet, { token })),
    });
  };

  it("claims nothing while the token is paused and claims the voucher once it is unpaused", async () => {
    const s = await signTestOpen(devnet, payer, payee.address, { amount: 2_000_000n });
    expect((await post("/channels", s.body)).status).toBe(201);
    const handed = await post(
      "/channels/vouchers",
      { vouchers: [wireVoucher(devnet, s.key, s.channelId, 1_500_000n)] },
      { authorization: `Bearer ${apiKey}` },
    );
    expect(ChannelVouchersResponseSchema.parse(await handed.json()).results[0]?.status).toBe("stored");
    const ctx = facilitator.context;
    const worker = createChannelClaimWorker(
      { ...ctx, outbox: ctx.outbox, contract: devnet.contracts.channels },
      { thresholdValue: 1_000_000n, operatorCacheMs: 0 },
    );
    const claimed = async () =>
      (
        await readChannel(devnet.publicClient, {
          channels: devnet.contracts.channels,
          channelId: s.channelId,
        })
      ).claimed;

    await setPaused(true);
    await ctx.tokenPause?.check();
    const nonce = await devnet.publicClient.getTransactionCount({ address: gas.address });
    expect(await worker.round()).toBe(0);
    await ctx.outbox.flush();
    expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(nonce);
    expect(await claimed()).toBe(0n);

    await setPaused(false);
    await ctx.tokenPause?.check();
    expect(await worker.round()).toBe(1);
    await ctx.outbox.flush();
    expect(await claimed()).toBe(1_500_000n);
  });
});
