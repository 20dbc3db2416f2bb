/**
 * Metered usage while USDC is paused by its pauser: recorded deductions stay pending (each pull would
 * fail its record), no transaction is sent, and they are deducted once after the unpause.
 */
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { pauseToken } from "../src/chain/actions/usdc/pauseToken.ts";
import { unpauseToken } from "../src/chain/actions/usdc/unpauseToken.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { subscribeThroughFacilitator } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createUsageSettler } from "../src/schemes/subscription/facilitator/usage/usageSettler.ts";
import { registerTestProvider } from "./support/channelFixtures.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

describe("usage deductions while USDC is paused", () => {
  let devnet: Devnet;
  let tf: TestFacilitator;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 4 });
    tf = await startTestFacilitator(devnet, { tokenPause: { intervalMs: 3_600_000 } });
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
  const statuses = async (refs: string[]) =>
    (
      await tf.store.query<{ status: string }>(
        "SELECT status FROM usage_records WHERE ref = ANY($1) ORDER BY ref",
        [refs],
      )
    ).map((r) => r.status);

  it("deducts nothing while the token is paused and each recorded amount once after the unpause", async () => {
    const provider = devnet.accounts[1]!;
    const apiKey = await registerTestProvider(tf.url, provider);
    const plan = await createPlan(devnet.walletClient(provider), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: 1_000_000n,
      interval: 30n * 86_400n,
      includedUnits: 0n,
      overageUnitPrice: 1_000n,
    });
    const planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash: plan }));
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await setOperator(devnet.walletClient(provider), {
        manager: devnet.contracts.subscriptionManager,
        operator: gasKey(),
        allowed: true,
      }),
    });
    const subscriber = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(subscriber.address, { usd: 10_000_000n });
    const { subscriptionId } = await subscribeThroughFacilitator(
      createFacilitatorClient({ url: tf.url, fetch }),
      subscriber,
      { planId, maxOverage: 1_000_000n, approval: 10_000_000n },
    );

    await setPaused(true);
    await tf.facilitator.context.tokenPause?.check();
    const before = await balanceOf(subscriber.address);
    const nonce = await nonceOfGasKey();
    const refs = ["paused-1", "paused-2"];
    const recorded = await fetch(`${tf.url}/usage`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ records: refs.map((ref) => ({ subscriptionId, amount: "7000", ref })) }),
    });
    expect(recorded.status).toBe(202);

    // A settler run (the test's own; the facilitator's holds the same way) claims nothing.
    const settler = createUsageSettler(tf.facilitator.context);
    expect(await settler.runOnce()).toEqual({ batches: 0, settled: 0, failed: 0 });
    expect(await statuses(refs)).toEqual(["pending", "pending"]);
    expect(await nonceOfGasKey()).toBe(nonce);

    await setPaused(false);
    await tf.facilitator.context.tokenPause?.check();
    await settler.runOnce();
    await expect.poll(() => statuses(refs), { timeout: 10_000 }).toEqual(["settled", "settled"]);
    expect(await balanceOf(subscriber.address)).toBe(before - 14_000n);
  }, 60_000);
});
