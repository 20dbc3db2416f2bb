/**
 * Plans in tokens nobody renews, the relay's side: anyone may create a plan in any token, and the renewal
 * keeper collects only plans in the tokens the facilitator serves. The facilitator still relayed
 * subscribes and lifecycle calls for plans in any other token, paying the gas of subscriptions it
 * would never renew (and giving a hostile token's plans the look of a supported service). It now
 * refuses them with 422 `UnsupportedToken` before anything is sent.
 *
 * Real devnet, a real facilitator over HTTP, and a second token (another FiatToken v2.2 deployment, the
 * stranger's own) that the facilitator does not serve.
 */
import { type Address, maxUint256 } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../../src/chain/actions/subscriptions/createPlan.ts";
import { getSubscription } from "../../src/chain/actions/subscriptions/getSubscription.ts";
import { subscribe } from "../../src/chain/actions/subscriptions/subscribe.ts";
import { approveToken } from "../../src/chain/actions/usd/approveToken.ts";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { deployFiatToken } from "../../src/chain/actions/usdc/deployFiatToken.ts";
import { mintFiatToken } from "../../src/chain/actions/usdc/mintFiatToken.ts";
import {
  getPlanIdFromReceipt,
  getSubscriptionIdFromReceipt,
} from "../../src/chain/events/decodeSubscriptionEvents.ts";
import { SubscriptionStatus } from "../../src/chain/events/subscriptionStatus.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../../src/http/facilitatorClient.ts";
import {
  getSubscriberInfo,
  signSubscribeRequest,
  signSubscriptionActionRequest,
} from "../../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { startTestFacilitator, type TestFacilitator } from "../support/facilitatorHarness.ts";

const PRICE = 9_000_000n;
const INTERVAL = 30n * 86_400n;

let devnet: Devnet;
let tf: TestFacilitator;
let client: FacilitatorClient;
let provider: DevnetAccount;
let stranger: DevnetAccount;
let subscriber: DevnetAccount;
let otherToken: Address;
let strangerPlan: bigint;
let servedPlan: bigint;

async function wait(hash: `0x${string}`) {
  const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
  if (receipt.status !== "success") throw new Error(`transaction ${hash} reverted`);
  return receipt;
}

async function planIn(owner: DevnetAccount, token: Address): Promise<bigint> {
  const hash = await createPlan(devnet.walletClient(owner), {
    manager: devnet.contracts.subscriptionManager,
    token,
    amount: PRICE,
    interval: INTERVAL,
    includedUnits: 0n,
    overageUnitPrice: 0n,
  });
  return getPlanIdFromReceipt(await wait(hash));
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  tf = await startTestFacilitator(devnet);
  client = createFacilitatorClient({ url: tf.url, fetch });
  provider = devnet.accounts[1]!;
  stranger = devnet.accounts[2]!;
  subscriber = devnet.accounts[3]!;

  // The stranger's own token, which this facilitator does not serve, and a plan in it.
  // Its proxy's admin is an address nobody holds a key to: the stranger initializes and mints.
  otherToken = (
    await deployFiatToken(devnet.walletClient(stranger), {
      admin: "0x000000000000000000000000000000000000ad02",
    })
  ).token;
  await wait(
    await mintFiatToken(devnet.walletClient(stranger), {
      token: otherToken,
      to: subscriber.address,
      amount: 100_000_000n,
    }),
  );
  strangerPlan = await planIn(stranger, otherToken);
  servedPlan = await planIn(provider, devnet.contracts.usd);
  // The subscriber approves the manager on both tokens itself, so no permit is involved.
  for (const token of [otherToken, devnet.contracts.usd]) {
    await wait(
      await approveToken(devnet.walletClient(subscriber), {
        token,
        spender: devnet.contracts.subscriptionManager,
        amount: maxUint256,
      }),
    );
  }
}, 60_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

/** Transactions the facilitator's gas account has sent so far. */
const sentByFacilitator = () =>
  devnet.publicClient.getTransactionCount({ address: tf.facilitator.context.gas.address });

const post = (path: string, body: unknown) =>
  fetch(`${tf.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });

async function signedSubscribe(planId: bigint) {
  const info = await getSubscriberInfo(client, subscriber.address);
  return signSubscribeRequest(subscriber.account, {
    chainId: devnet.chain.id,
    manager: devnet.contracts.subscriptionManager,
    planId,
    maxOverage: 0n,
    nonce: BigInt(info.intentNonce),
    deadline: BigInt(info.chainTime + 600),
  });
}

describe("relayed calls for a plan in a token the facilitator does not serve", () => {
  it("refuses a relayed subscribe with 422 UnsupportedToken before sending anything, and still relays a plan in a served token", async () => {
    const sentBefore = await sentByFacilitator();
    const balanceBefore = await getTokenBalance(devnet.publicClient, {
      token: otherToken,
      owner: subscriber.address,
    });
    const nonceBefore = (await getSubscriberInfo(client, subscriber.address)).intentNonce;

    const response = await post("/subscriptions", await signedSubscribe(strangerPlan));
    expect(response.status).toBe(422);
    const body = (await response.json()) as { error: { code: string; details?: Record<string, unknown> } };
    expect(body.error.code).toBe("UnsupportedToken");
    expect(String(body.error.details?.token).toLowerCase()).toBe(otherToken.toLowerCase());

    expect(await sentByFacilitator()).toBe(sentBefore);
    expect((await getSubscriberInfo(client, subscriber.address)).intentNonce).toBe(nonceBefore);
    expect(await getTokenBalance(devnet.publicClient, { token: otherToken, owner: subscriber.address })).toBe(
      balanceBefore,
    );

    // The same subscriber, a plan in the token the facilitator serves: relayed.
    const served = await post("/subscriptions", await signedSubscribe(servedPlan));
    expect(served.status).toBe(201);
    expect(await sentByFacilitator()).toBe(sentBefore + 1);
  });

  it("refuses to relay a pause or a cancel of a subscription to such a plan, sending nothing", async () => {
    const receipt = await wait(
      await subscribe(devnet.walletClient(subscriber), {
        manager: devnet.contracts.subscriptionManager,
        planId: strangerPlan,
        maxOverage: 0n,
      }),
    );
    const subscriptionId = getSubscriptionIdFromReceipt(receipt);
    const sentBefore = await sentByFacilitator();

    for (const action of ["pause", "cancel"] as const) {
      const info = await getSubscriberInfo(client, subscriber.address);
      const request = await signSubscriptionActionRequest(subscriber.account, {
        action,
        chainId: devnet.chain.id,
        manager: devnet.contracts.subscriptionManager,
        subscriptionId,
        nonce: BigInt(info.intentNonce),
        deadline: BigInt(info.chainTime + 600),
      });
      const response = await post(`/subscriptions/${subscriptionId}/${action}`, request);
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("UnsupportedToken");
    }
    expect(await sentByFacilitator()).toBe(sentBefore);
    const onChain = await getSubscription(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      subscriptionId,
    });
    expect(onChain.status).toBe(SubscriptionStatus.Active);
  });
});
