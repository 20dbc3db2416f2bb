/**
 * The learning policy on a real devnet (docs/policy.md "Cancelling before renewal"): a subscription the
 * agent's calls no longer justify is kept while its period runs, cancelled (subscriber-signed, relayed
 * by the facilitator) in the window before its renewal, and never charged again; the cancel is claimed
 * once, so a second check does nothing.
 */
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  cancelUnneededSubscriptions,
  createMemoryCancelClaims,
} from "../src/agent/policy/cancelUnneededSubscriptions.ts";
import { createMemoryDemandHistory } from "../src/agent/policy/createDemandHistory.ts";
import { cancelLeadSeconds } from "../src/agent/policy/reviewSubscription.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { createFixedClock } from "../src/protocol/clock.ts";
import { facilitatorSubscriptions } from "../src/schemes/subscription/agent/heldSubscriptions.ts";
import { getSubscriptionInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
const PRICE = 1_000_000n; // 1 USDC a day
const ONE_TIME = 10_000n; // 0.01 USDC a call: the plan pays from 100 calls a day

let devnet: Devnet;
let tf: TestFacilitator;
let planId: bigint;
let provider: Address;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
  const seller = devnet.accounts[1]!;
  provider = seller.address;
  const hash = await createPlan(devnet.walletClient(seller), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: PRICE,
    interval: BigInt(DAY),
    includedUnits: 0n,
    overageUnitPrice: 0n,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
}, 120_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

describe("cancelling a subscription the forecast no longer justifies", () => {
  it("cancels it in the window before renewal, once, and the renewal charges nothing", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 10n * PRICE });
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url, fetch });
    const subscriptionId = await payer.subscribe({ planId, approval: 5n * PRICE });
    const client = createFacilitatorClient({ url: tf.url, fetch });
    const info = await getSubscriptionInfo(client, subscriptionId);
    const renewal = Number(info.nextChargeAt);

    // The agent's calls to the plan: 5 a day for two days (its clock, not the chain's).
    const clock = createFixedClock(1_700_000_000_000);
    const demand = createMemoryDemandHistory({ clock });
    const key = { agent: "researcher", provider, planId: planId.toString() };
    for (let i = 0; i < 10; i += 1) {
      await demand.record(key, DAY, { oneTimePrice: ONE_TIME });
      clock.advance((DAY * 1000) / 5);
    }
    const claims = createMemoryCancelClaims();
    const check = () =>
      cancelUnneededSubscriptions({
        agent: "researcher",
        subscriber: account.address,
        source: facilitatorSubscriptions({
          address: payer.address,
          facilitator: payer.facilitator,
          cancel: (id) => payer.cancel(id),
        }),
        demand,
        claims,
        clock,
      });

    // Paid for the day: kept while the period runs.
    const [early] = await check();
    expect(early).toMatchObject({ subscriptionId: subscriptionId.toString(), action: "keep" });
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Active");

    // Inside the window before the renewal: cancelled, and why.
    const lead = cancelLeadSeconds(DAY);
    const now = Number((await devnet.publicClient.getBlock({ blockTag: "latest" })).timestamp);
    await devnet.advanceTime(renewal - now - Math.floor(lead / 2));
    const [late] = await check();
    expect(late).toMatchObject({ action: "cancel", outcome: "cancelled" });
    expect(late!.reason).toMatch(
      /paying once would cost [\d.]+ USDC next 1 day.*renewing 1 USDC: cancel before it renews/,
    );
    expect((await getSubscriptionInfo(client, subscriptionId)).status).toBe("Cancelled");
    // Checked again: nothing more to do (the chain says Cancelled; no second cancel is sent).
    expect(await check()).toEqual([]);

    // The renewal comes due and the keeper runs: nothing is charged.
    const before = await getTokenBalance(devnet.publicClient, {
      token: devnet.contracts.usd,
      owner: account.address,
    });
    await devnet.advanceTime(lead + 60);
    const ctx = tf.facilitator.context;
    const keeper = createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx) });
    await keeper.runOnce();
    await keeper.runOnce();
    expect(
      await getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: account.address }),
    ).toBe(before);
    expect(before).toBe(9n * PRICE);
  }, 180_000);
});
