/**
 * Renewals while USDC is paused by its pauser: the keeper sends no `collectMany` for a paused token (a
 * pull would fail and mark the subscription PastDue), and one that met the pause anyway counts no
 * failure, so the renewal is collected at the first run after the unpause — not a day of back-off later.
 */
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { pauseToken } from "../src/chain/actions/usdc/pauseToken.ts";
import { unpauseToken } from "../src/chain/actions/usdc/unpauseToken.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import type { FacilitatorContext } from "../src/facilitator/facilitatorContext.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../src/http/facilitatorClient.ts";
import {
  getSubscriptionInfo,
  subscribeThroughFacilitator,
} from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const INTERVAL = 30 * DAY;
const PRICE = 9_000_000n;

describe("renewals while USDC is paused", () => {
  let devnet: Devnet;
  let tf: TestFacilitator;
  let client: FacilitatorClient;
  let planId: bigint;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 4 });
    // The watch reads paused() only when told to (`check`), so each step decides what the keeper knows.
    tf = await startTestFacilitator(devnet, { tokenPause: { intervalMs: 3_600_000 } });
    client = createFacilitatorClient({ url: tf.url, fetch });
    const hash = await createPlan(devnet.walletClient(devnet.accounts[1]!), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: PRICE,
      interval: BigInt(INTERVAL),
      includedUnits: 0n,
      overageUnitPrice: 0n,
    });
    planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
  }, 60_000);
  afterAll(async () => {
    await tf?.stop();
    await devnet?.stop();
  });

  const gasKey = () => devnet.accounts[devnet.accounts.length - 1]!.address;
  const nonceOfGasKey = () => devnet.publicClient.getTransactionCount({ address: gasKey() });
  const balanceOf = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const setPaused = async (paused: boolean) => {
    const wallet = devnet.walletClient(devnet.deployer);
    const token = devnet.contracts.usd;
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await (paused ? pauseToken(wallet, { token }) : unpauseToken(wallet, { token })),
    });
  };
  const keeper = (ctx: FacilitatorContext) =>
    createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx), retryAfterSeconds: DAY });

  async function dueSubscription() {
    const subscriber = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(subscriber.address, { usd: 5n * PRICE });
    const { subscriptionId } = await subscribeThroughFacilitator(client, subscriber, {
      planId,
      maxOverage: 0n,
      approval: PRICE * 5n,
    });
    return { subscriber, subscriptionId };
  }

  it("sends no renewal while the token is paused, leaves the subscription Active, and collects it once after the unpause", async () => {
    const { subscriber, subscriptionId } = await dueSubscription();
    await devnet.advanceTime(INTERVAL + 60);
    await setPaused(true);
    await tf.facilitator.context.tokenPause?.check();
    const before = await balanceOf(subscriber.address);
    const nonce = await nonceOfGasKey();

    const k = keeper(tf.facilitator.context);
    await k.runOnce();
    await k.runOnce();
    expect(await nonceOfGasKey()).toBe(nonce);
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Active");

    await setPaused(false);
    await tf.facilitator.context.tokenPause?.check();
    await k.runOnce();
    await k.runOnce();
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Active");
    expect(await balanceOf(subscriber.address)).toBe(before - PRICE);
  }, 60_000);

  it("collects at the first run after the unpause a renewal that met the pause on chain, without a day of back-off", async () => {
    const { subscriber, subscriptionId } = await dueSubscription();
    await devnet.advanceTime(INTERVAL + 60);
    const before = await balanceOf(subscriber.address);
    // Paused on chain but not yet seen by the watch: the keeper sends, and the pull is refused.
    await setPaused(true);
    const k = keeper(tf.facilitator.context);
    await k.runOnce();
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("PastDue");
    // The refusal named the pause: the watch reads paused() without waiting for its round.
    await vi.waitFor(() =>
      expect(tf.facilitator.context.tokenPause?.isPaused(devnet.contracts.usd)).toBe(true),
    );

    await setPaused(false);
    await tf.facilitator.context.tokenPause?.check();
    await k.runOnce();
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Active");
    expect(await balanceOf(subscriber.address)).toBe(before - PRICE);
  }, 60_000);
});
