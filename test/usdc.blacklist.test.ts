/**
 * Tollgate when Circle's USDC (FiatToken v2.2) blacklists a payer or a payee: a new payment is refused
 * before any gas is spent with `AccountBlacklisted` naming the account and the token; an account
 * blacklisted after its payment was checked fails its own batch item alone, with the reason recorded and
 * sent to the payee, while the batch's other items settle; a blacklisted subscriber's renewal goes past
 * due with the reason decoded in the subscription's record, its API answer and the provider's event; a
 * channel is not opened by a blacklisted payer nor to a blacklisted payee, and a claim for a payee
 * blacklisted since is held with the reason and the payee told.
 */
import { x402Client } from "@x402/core/client";
import { HTTPFacilitatorClient } from "@x402/core/http";
import type { PaymentRequirements } from "@x402/core/types";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { type Address, getAddress, type Hex, maxUint256 } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { blacklistAccount } from "../src/chain/actions/usdc/blacklistAccount.ts";
import {
  approveToken,
  createPlan,
  getPlanIdFromReceipt,
  getSubscriptionIdFromReceipt,
  getTokenBalance,
  subscribe,
} from "../src/chain/index.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../src/facilitator/createFacilitator.ts";
import { ErrorBodySchema } from "../src/protocol/errors.ts";
import type { SignedPayment } from "../src/protocol/signedPayment.ts";
import { SubscriptionInfoSchema } from "../src/protocol/subscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  signTestOpen,
  startChannelFacilitator,
  wireVoucher,
} from "./support/channelFixtures.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
/** Called after a settlement batch's transaction is signed and recorded, before it is broadcast. */
let beforeBroadcast: ((batchId: number) => Promise<void>) | undefined;
let nextAccount = 1;

const freshAddress = () => privateKeyToAccount(generatePrivateKey()).address;
/** A dev account no other test uses (each holds 10 000 USDC). */
const nextPayer = (): DevnetAccount => devnet.accounts[nextAccount++]!;
const balance = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
const gasAccount = () => devnet.accounts[devnet.accounts.length - 1]!;

async function blacklist(account: Address): Promise<void> {
  const hash = await blacklistAccount(devnet.walletClient(devnet.deployer), {
    token: devnet.contracts.usd,
    account,
  });
  expect((await devnet.publicClient.waitForTransactionReceipt({ hash })).status).toBe("success");
}

function authorize(signedPayment: SignedPayment): Promise<Response> {
  return fetch(`${tf.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
}

/** Polls the store (no fixed sleep) until `condition` holds. */
async function until(condition: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error("condition not met");
}

const pendingPayments = async () =>
  Number(
    (await tf.store.query<{ n: string }>("SELECT count(*) AS n FROM payments WHERE status = 'pending'"))[0]!
      .n,
  );

/**
 * Settles `payments` in one batch: a first payment is sent alone and its batch held (one batch in flight
 * at a time) until all of `payments` are queued behind it; they then go in the next batch, and `act`
 * runs after that batch is signed, before it is broadcast — after each payment was checked on chain.
 */
async function settleInOneBatch(
  payments: SignedPayment[],
  act: () => Promise<void>,
): Promise<{ responses: Response[]; batchIds: Set<number> }> {
  let releaseFirst: () => void = () => undefined;
  const firstHeld = new Promise<void>((resolve) => {
    releaseFirst = resolve;
  });
  let firstBatch: number | undefined;
  let reachedFirst: () => void = () => undefined;
  const firstReached = new Promise<void>((resolve) => {
    reachedFirst = resolve;
  });
  beforeBroadcast = async (batchId) => {
    if (firstBatch === undefined) {
      firstBatch = batchId;
      reachedFirst();
      await firstHeld;
      return;
    }
    beforeBroadcast = undefined;
    await act();
  };
  try {
    const opener = authorize(
      await signTestPayment(devnet, nextPayer(), { payTo: freshAddress(), amount: 10_000n }),
    );
    await firstReached;
    const responses = payments.map((payment) => authorize(payment));
    await until(async () => (await pendingPayments()) === payments.length);
    releaseFirst();
    expect((await opener).status).toBe(200);
    const settled = await Promise.all(responses);
    const rows = await tf.store.query<{ batch_id: string }>(
      "SELECT batch_id FROM payments WHERE nonce = ANY($1::text[])",
      [payments.map((p) => p.authorization.nonce.toLowerCase())],
    );
    return { responses: settled, batchIds: new Set(rows.map((r) => Number(r.batch_id))) };
  } finally {
    beforeBroadcast = undefined;
  }
}

async function failedEvents(): Promise<Record<string, unknown>[]> {
  const rows = await tf.store.query<{ data: Record<string, unknown> }>(
    "SELECT data FROM events WHERE type = 'payment.failed' ORDER BY id",
  );
  return rows.map((r) => r.data);
}

async function paymentRow(nonce: Hex) {
  const rows = await tf.store.query<{
    status: string;
    failure_code: string | null;
    failure_message: string | null;
  }>("SELECT status, failure_code, failure_message FROM payments WHERE nonce = $1", [nonce.toLowerCase()]);
  return rows[0];
}

beforeAll(async () => {
  devnet = await startDevnet({ token: "usdc", accounts: 20 });
  tf = await startTestFacilitator(devnet, {
    settlement: {
      maxInFlight: 1,
      lingerMs: 20,
      faults: { afterRecord: (batchId) => beforeBroadcast?.(batchId) },
    },
  });
});
afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

describe("a payment from or to an account USDC has blacklisted", () => {
  it("refuses a blacklisted payer's payment with 403 AccountBlacklisted naming the payer and the token, before any gas is spent", async () => {
    const payer = nextPayer();
    await blacklist(payer.address);
    const payment = await signTestPayment(devnet, payer, { payTo: freshAddress(), amount: 250_000n });
    const gasNonce = await devnet.publicClient.getTransactionCount({ address: gasAccount().address });

    const response = await authorize(payment);
    expect(response.status).toBe(403);
    const { error } = ErrorBodySchema.parse(await response.json());
    expect(error.code).toBe("AccountBlacklisted");
    expect(error.details).toMatchObject({
      account: payer.address,
      role: "payer",
      token: getAddress(devnet.contracts.usd),
    });
    expect(error.message).toContain(payer.address);
    // Refused by the simulation: no transaction sent, no payment recorded.
    expect(await devnet.publicClient.getTransactionCount({ address: gasAccount().address })).toBe(gasNonce);
    expect(await paymentRow(payment.authorization.nonce)).toBeUndefined();
  });

  it("refuses a payment to a blacklisted payee with 403 AccountBlacklisted naming the payee, before any gas is spent", async () => {
    const payee = freshAddress();
    await blacklist(payee);
    const payment = await signTestPayment(devnet, nextPayer(), { payTo: payee, amount: 250_000n });
    const gasNonce = await devnet.publicClient.getTransactionCount({ address: gasAccount().address });

    const response = await authorize(payment);
    expect(response.status).toBe(403);
    const { error } = ErrorBodySchema.parse(await response.json());
    expect(error.code).toBe("AccountBlacklisted");
    expect(error.details).toMatchObject({ account: payee, role: "payee" });
    expect(await devnet.publicClient.getTransactionCount({ address: gasAccount().address })).toBe(gasNonce);
  });

  it("refuses an x402 payment from a blacklisted payer at /x402/verify, the message naming the payer", async () => {
    const payer = nextPayer();
    await blacklist(payer.address);
    const network = devnet.network;
    const offer: PaymentRequirements = {
      scheme: "exact",
      network,
      amount: "250000",
      asset: devnet.contracts.usd,
      payTo: freshAddress(),
      maxTimeoutSeconds: 300,
      extra: { name: devnet.token.name, version: devnet.token.version },
    };
    const payload = await new x402Client()
      .register(network, new ExactEvmScheme(payer.account))
      .setSpendControls({ allowedAssets: [{ network, asset: offer.asset }] })
      .createPaymentPayload({
        x402Version: 2,
        resource: {
          url: "http://127.0.0.1/paid",
          description: "a paid resource",
          mimeType: "application/json",
        },
        accepts: [offer],
      });
    const result = await new HTTPFacilitatorClient({ url: `${tf.url}/x402` }).verify(payload, offer);
    expect(result).toMatchObject({
      isValid: false,
      invalidReason: "invalid_exact_evm_transaction_simulation_failed",
      payer: payer.address,
    });
    expect(result.invalidMessage).toContain(payer.address);
  });

  it("fails only the item of a payer blacklisted after its payment was checked: AccountBlacklisted recorded and sent to the payee, the batch's other payment settled", async () => {
    const [blocked, other] = [nextPayer(), nextPayer()];
    const [payee, otherPayee] = [freshAddress(), freshAddress()];
    const blockedPayment = await signTestPayment(devnet, blocked, { payTo: payee, amount: 300_000n });
    const otherPayment = await signTestPayment(devnet, other, { payTo: otherPayee, amount: 400_000n });

    const { responses, batchIds } = await settleInOneBatch([blockedPayment, otherPayment], () =>
      blacklist(blocked.address),
    );
    expect(batchIds.size).toBe(1);
    const [blockedResponse, otherResponse] = responses as [Response, Response];
    expect(otherResponse.status).toBe(200);
    expect(await balance(otherPayee)).toBe(400_000n);
    expect(blockedResponse.status).toBe(403);
    expect(ErrorBodySchema.parse(await blockedResponse.json()).error.code).toBe("AccountBlacklisted");
    expect(await balance(payee)).toBe(0n);

    const row = await paymentRow(blockedPayment.authorization.nonce);
    expect(row).toMatchObject({ status: "failed", failure_code: "AccountBlacklisted" });
    expect(row?.failure_message).toContain(blocked.address);
    const event = (await failedEvents()).find(
      (e) => e.nonce === blockedPayment.authorization.nonce.toLowerCase(),
    );
    expect(event).toMatchObject({
      payTo: payee.toLowerCase(),
      code: "AccountBlacklisted",
      account: blocked.address,
      role: "payer",
    });
    expect(typeof event?.transaction).toBe("string");
  });

  it("fails only the items paying a payee blacklisted after they were checked, tells that payee, and settles another provider's item in the same batch", async () => {
    const [first, second, third] = [nextPayer(), nextPayer(), nextPayer()];
    const [blockedPayee, otherPayee] = [freshAddress(), freshAddress()];
    const toBlocked = [
      await signTestPayment(devnet, first, { payTo: blockedPayee, amount: 100_000n }),
      await signTestPayment(devnet, second, { payTo: blockedPayee, amount: 200_000n }),
    ];
    const toOther = await signTestPayment(devnet, third, { payTo: otherPayee, amount: 500_000n });

    const { responses, batchIds } = await settleInOneBatch([...toBlocked, toOther], () =>
      blacklist(blockedPayee),
    );
    expect(batchIds.size).toBe(1);
    expect(responses.map((r) => r.status)).toEqual([403, 403, 200]);
    expect(await balance(otherPayee)).toBe(500_000n);
    expect(await balance(first.address)).toBe(10_000_000_000n);

    const events = await failedEvents();
    for (const payment of toBlocked) {
      expect(await paymentRow(payment.authorization.nonce)).toMatchObject({
        status: "failed",
        failure_code: "AccountBlacklisted",
      });
      expect(events.find((e) => e.nonce === payment.authorization.nonce.toLowerCase())).toMatchObject({
        payTo: blockedPayee.toLowerCase(),
        code: "AccountBlacklisted",
        account: blockedPayee,
        role: "payee",
      });
    }
  });
});

describe("a subscription whose subscriber USDC has blacklisted", () => {
  it("goes PastDue at renewal with AccountBlacklisted in its record, GET /subscriptions/:id and subscription.renewal_failed", async () => {
    const [subscriber, provider] = [nextPayer(), nextPayer()];
    const manager = devnet.contracts.subscriptionManager;
    const interval = 3_600n;
    const mined = async (hash: Hex) => devnet.publicClient.waitForTransactionReceipt({ hash });
    const planId = getPlanIdFromReceipt(
      await mined(
        await createPlan(devnet.walletClient(provider), {
          manager,
          token: devnet.contracts.usd,
          amount: 1_000_000n,
          interval,
          includedUnits: 0n,
          overageUnitPrice: 0n,
        }),
      ),
    );
    await mined(
      await approveToken(devnet.walletClient(subscriber), {
        token: devnet.contracts.usd,
        spender: manager,
        amount: maxUint256,
      }),
    );
    const subscriptionId = getSubscriptionIdFromReceipt(
      await mined(await subscribe(devnet.walletClient(subscriber), { manager, planId, maxOverage: 0n })),
    ).toString();

    await blacklist(subscriber.address);
    await devnet.advanceTime(interval + 60n);
    const ctx = tf.facilitator.context;
    const run = await createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx) }).runOnce();
    expect(run.failed).toContain(subscriptionId);

    const info = SubscriptionInfoSchema.parse(
      await (await fetch(`${tf.url}/subscriptions/${subscriptionId}`)).json(),
    );
    expect(info.status).toBe("PastDue");
    expect(info.renewalFailure?.code).toBe("AccountBlacklisted");
    const [row] = await tf.store.query<{ renewal_failure_code: string | null }>(
      "SELECT renewal_failure_code FROM subscriptions WHERE subscription_id = $1",
      [subscriptionId],
    );
    expect(row?.renewal_failure_code).toBe("AccountBlacklisted");
    const [event] = await tf.store.query<{ data: Record<string, unknown> }>(
      "SELECT data FROM events WHERE type = 'subscription.renewal_failed' AND data ->> 'subscriptionId' = $1",
      [subscriptionId],
    );
    expect(event?.data).toMatchObject({
      provider: provider.address,
      subscriber: subscriber.address,
      code: "AccountBlacklisted",
    });
    expect(event?.data.message).toMatch(/blacklisted/);
  });
});

describe("a channel with an account USDC has blacklisted", () => {
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  /** Its own gas account: the suite's other facilitator sends from the last one. */
  const channelGas = () => devnet.accounts[devnet.accounts.length - 2]!;
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });

  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas: channelGas(),
      channels: {
        claims: { thresholdValue: 1n, maxAgeMs: 3_600_000, intervalMs: 100, operatorCacheMs: 0 },
        minDeposit: 100_000n,
      },
    }));
  });
  afterAll(async () => {
    await server?.close();
    await facilitator?.stop();
    await store?.close();
  });

  it("refuses to open a blacklisted payer's channel, and a channel to a blacklisted payee, with 403 AccountBlacklisted before any gas is spent", async () => {
    const [payer, payee] = [nextPayer(), nextPayer()];
    const gasNonce = await devnet.publicClient.getTransactionCount({ address: channelGas().address });
    await blacklist(payer.address);
    const fromBlacklisted = await post("/channels", (await signTestOpen(devnet, payer, payee.address)).body);
    expect(fromBlacklisted.status).toBe(403);
    expect(ErrorBodySchema.parse(await fromBlacklisted.json()).error).toMatchObject({
      code: "AccountBlacklisted",
      details: { account: payer.address, role: "payer" },
    });

    const blacklistedPayee = freshAddress();
    await blacklist(blacklistedPayee);
    const toBlacklisted = await post("/channels", (await signTestOpen(devnet, payee, blacklistedPayee)).body);
    expect(toBlacklisted.status).toBe(403);
    expect(ErrorBodySchema.parse(await toBlacklisted.json()).error).toMatchObject({
      code: "AccountBlacklisted",
      details: { account: blacklistedPayee, role: "payee" },
    });
    expect(await devnet.publicClient.getTransactionCount({ address: channelGas().address })).toBe(gasNonce);
  });

  it("holds the claim of a payee blacklisted after its channel opened, with AccountBlacklisted recorded and channel.claim_failed sent to it", async () => {
    const [payer, payee] = [nextPayer(), nextPayer()];
    const apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, channelGas().address);
    const opened = await signTestOpen(devnet, payer, payee.address);
    expect((await post("/channels", opened.body)).status).toBe(201);

    await blacklist(payee.address);
    const voucher = wireVoucher(devnet, opened.key, opened.channelId, 150_000n);
    const stored = await post(
      "/channels/vouchers",
      { vouchers: [voucher] },
      { authorization: `Bearer ${apiKey}` },
    );
    expect(stored.status).toBe(200);

    await until(async () => {
      const [row] = await store.query<{ claim_error: string | null }>(
        "SELECT claim_error FROM channels WHERE channel_id = $1",
        [opened.channelId.toLowerCase()],
      );
      return row?.claim_error != null;
    });
    const [row] = await store.query<{ claim_error: string | null; claimed: string }>(
      "SELECT claim_error, claimed FROM channels WHERE channel_id = $1",
      [opened.channelId.toLowerCase()],
    );
    expect(row).toMatchObject({ claim_error: "AccountBlacklisted" });
    expect(BigInt(row!.claimed)).toBe(0n);
    expect(await balance(payee.address)).toBe(10_000_000_000n);
    const [event] = await store.query<{ data: Record<string, unknown> }>(
      "SELECT data FROM events WHERE type = 'channel.claim_failed'",
    );
    expect(event?.data).toMatchObject({
      provider: payee.address.toLowerCase(),
      channelId: opened.channelId.toLowerCase(),
      code: "AccountBlacklisted",
      account: payee.address,
      role: "payee",
    });
  });
});
