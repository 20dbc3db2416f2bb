/**
 * `POST /subscriptions/approval` on a real devnet: the facilitator relays a subscriber-signed permit
 * topping up the SubscriptionManager's allowance, and refuses, before paying any gas, every permit
 * that cannot serve this manager's subscriptions (docs/subscriptions.md, "Approval top-ups").
 * The store is PostgreSQL when DATABASE_URL is set, PGlite otherwise.
 */
import { type Address, getAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getPermitNonce } from "../src/chain/actions/usd/getPermitNonce.ts";
import { getTokenAllowance } from "../src/chain/actions/usd/getTokenAllowance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import type { TokenDomain } from "../src/chain/signers/eip712Types.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../src/http/facilitatorClient.ts";
import type { ApprovalRequest } from "../src/protocol/subscriptions.ts";
import {
  approveThroughFacilitator,
  getSubscriberInfo,
  signApprovalRequest,
  subscribeThroughFacilitator,
} from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const PRICE = 1_000_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let client: FacilitatorClient;
let provider: DevnetAccount;
let planId: bigint;
let domain: TokenDomain;
let manager: Address;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
  client = createFacilitatorClient({ url: tf.url, fetch });
  provider = devnet.accounts[1]!;
  manager = devnet.contracts.subscriptionManager;
  domain = {
    name: devnet.token.name,
    version: devnet.token.version,
    chainId: devnet.chain.id,
    verifyingContract: devnet.contracts.usd,
  };
  const hash = await createPlan(devnet.walletClient(provider), {
    manager,
    token: devnet.contracts.usd,
    amount: PRICE,
    interval: BigInt(30 * 86_400),
    includedUnits: 0n,
    overageUnitPrice: 0n,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
}, 120_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

async function subscriber(subscribed: boolean) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 10_000_000n });
  if (subscribed) {
    await subscribeThroughFacilitator(client, account, {
      planId,
      maxOverage: 0n,
      approval: PRICE,
      exactApproval: true,
    });
  }
  return account;
}

const allowanceOf = (owner: Address) =>
  getTokenAllowance(devnet.publicClient, { token: devnet.contracts.usd, owner, spender: manager });

/** Transactions the facilitator's gas account has sent: a refusal must not add one. */
const gasSent = () =>
  devnet.publicClient.getTransactionCount({ address: tf.facilitator.context.gas.address });

async function post(body: unknown) {
  const response = await fetch(`${tf.url}/subscriptions/approval`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    body: (await response.json()) as { error?: { code?: string; details?: Record<string, unknown> } },
  };
}

async function signed(
  account: ReturnType<typeof privateKeyToAccount>,
  over: { spender?: Address; value?: bigint } = {},
): Promise<ApprovalRequest> {
  const info = await getSubscriberInfo(client, account.address, { token: devnet.contracts.usd });
  return signApprovalRequest(account, {
    manager: over.spender ?? manager,
    domain,
    value: over.value ?? 5_000_000n,
    nonce: BigInt(info.token!.permitNonce),
    deadline: BigInt(info.chainTime + 600),
  });
}

describe("POST /subscriptions/approval", () => {
  it("sets the manager's allowance to the permit's value for a subscriber, gasless", async () => {
    const account = await subscriber(true);
    expect(await allowanceOf(account.address)).toBe(0n);
    const reply = await approveThroughFacilitator(client, account, {
      token: devnet.contracts.usd,
      value: 3_000_000n,
    });
    expect(reply).toMatchObject({
      owner: account.address,
      token: getAddress(devnet.contracts.usd),
      spender: getAddress(manager),
      value: "3000000",
      allowance: "3000000",
    });
    expect(await allowanceOf(account.address)).toBe(3_000_000n);
    expect(await devnet.publicClient.getBalance({ address: account.address })).toBe(0n);
  });

  it("answers a replayed permit with 409 NonceAlreadyUsed, sending nothing", async () => {
    const account = await subscriber(true);
    const request = await signed(account, { value: 2_000_000n });
    const first = await post(request);
    expect(first.status).toBe(200);
    const sent = await gasSent();
    const replay = await post(request);
    expect(replay.status).toBe(409);
    expect(replay.body.error).toMatchObject({ code: "NonceAlreadyUsed" });
    expect(await gasSent()).toBe(sent);
    expect(await allowanceOf(account.address)).toBe(2_000_000n);
    expect(
      await getPermitNonce(devnet.publicClient, { token: devnet.contracts.usd, owner: account.address }),
    ).toBe(BigInt(request.nonce) + 1n);
  });

  it("refuses another spender, an unserved token, an owner without a subscription and a forged signature, sending nothing", async () => {
    const account = await subscriber(true);
    const stranger = await subscriber(false);
    const sent = await gasSent();

    const otherSpender = await post(await signed(account, { spender: provider.address }));
    expect(otherSpender.status).toBe(400);
    expect(otherSpender.body.error).toMatchObject({ code: "InvalidRequest", details: { reason: "spender" } });

    const unserved = await post({ ...(await signed(account)), token: provider.address });
    expect(unserved.status).toBe(422);
    expect(unserved.body.error).toMatchObject({ code: "UnsupportedToken" });

    const noSubscription = await post(await signed(stranger));
    expect(noSubscription.status).toBe(400);
    expect(noSubscription.body.error).toMatchObject({
      code: "InvalidRequest",
      details: { reason: "no_subscription" },
    });

    // Signed for another spender but posted as if for the manager: the simulation refuses it.
    const relabelled = await post({
      ...(await signed(account, { spender: provider.address })),
      spender: manager,
    });
    expect(relabelled.status).toBe(422);
    expect(relabelled.body.error).toMatchObject({ code: "InvalidSignature" });

    const ahead = await signed(account);
    const future = await post({ ...ahead, nonce: (BigInt(ahead.nonce) + 1n).toString() });
    expect(future.status).toBe(400);
    expect(future.body.error).toMatchObject({ code: "InvalidRequest", details: { reason: "nonce" } });

    const malformed = await post({ owner: account.address });
    expect(malformed.status).toBe(400);

    expect(await gasSent()).toBe(sent);
    expect(await allowanceOf(account.address)).toBe(0n);
    expect(await allowanceOf(stranger.address)).toBe(0n);
  });
});
