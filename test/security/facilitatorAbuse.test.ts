/**
 * Junk payments, rate limits and expired memos: a stranger must not make the facilitator spend
 * gas or chain reads on junk, nor put junk into a provider's events (webhooks, feed) and analytics.
 * Over a real devnet and a real facilitator served on a loopback port.
 */
import { randomBytes } from "node:crypto";
import { x402Client } from "@x402/core/client";
import type { PaymentPayload, PaymentRequirements } from "@x402/core/types";
import { ExactEvmScheme as ExactEvmClientScheme } from "@x402/evm/exact/client";
import type { Address, PrivateKeyAccount } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import {
  type CreateFacilitatorOptions,
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import { signTestPayment, testMemo } from "../support/facilitatorHarness.ts";

type Running = { facilitator: Facilitator; server: RunningServer; store: Store; url: string };

let devnet: Devnet;
const running: Running[] = [];

/** A facilitator over the devnet with the given abuse settings (the rest as the test harness has it). */
async function startFacilitator(
  options: Partial<Pick<CreateFacilitatorOptions, "rateLimits">> & { minAmount?: bigint } = {},
): Promise<Running> {
  const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  const facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[devnet.accounts.length - 1]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
        ...(options.minAmount === undefined ? {} : { minAmount: options.minAmount }),
      },
    ],
    settlement: { reconcileIntervalMs: 200 },
    ...(options.rateLimits === undefined ? {} : { rateLimits: options.rateLimits }),
  });
  await facilitator.start();
  const server = await serveApp(facilitator.app);
  const r = { facilitator, server, store, url: server.url };
  running.push(r);
  return r;
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let json: { error?: { code?: string; details?: Record<string, unknown> } } & Record<string, unknown> = {};
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: response.status, body: json, retryAfter: response.headers.get("retry-after") };
}

async function registerProvider(url: string, account: DevnetAccount): Promise<string> {
  const challenge = (await post(`${url}/providers/challenge`, { address: account.address })).body
    .challenge as string;
  const signature = await account.account.signMessage({ message: challenge });
  return (await post(`${url}/providers`, { address: account.address, challenge, signature })).body
    .apiKey as string;
}

/** What a provider's webhooks and event feed are made of: the events that name it as payee. */
async function eventsFor(store: Store, payTo: Address): Promise<number> {
  const rows = await store.query<{ n: string }>(
    "SELECT count(*) AS n FROM events WHERE lower(data->>'payTo') = $1 OR lower(data->>'provider') = $1",
    [payTo.toLowerCase()],
  );
  return Number(rows[0]?.n ?? 0);
}

async function paymentsTo(store: Store, payTo: Address): Promise<number> {
  const rows = await store.query<{ n: string }>("SELECT count(*) AS n FROM payments WHERE pay_to = $1", [
    payTo.toLowerCase(),
  ]);
  return Number(rows[0]?.n ?? 0);
}

async function analyticsCount(url: string, apiKey: string): Promise<number> {
  const response = await fetch(`${url}/analytics/summary`, {
    headers: { authorization: `Bearer ${apiKey}` },
  });
  expect(response.status).toBe(200);
  return ((await response.json()) as { count: number }).count;
}

/** A key that holds neither ETH nor USD, as the review's attacker used. */
function strangerAccount(): DevnetAccount {
  const privateKey = generatePrivateKey();
  const account = privateKeyToAccount(privateKey);
  return { address: account.address, privateKey, account } as DevnetAccount;
}

const gasNonce = () =>
  devnet.publicClient.getTransactionCount({ address: devnet.accounts[devnet.accounts.length - 1]!.address });

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 8 });
});

/**
 * Each test's facilitators stop when it ends: left running, their background loops (settlement
 * reconciler, indexer, workers) piled up test after test in this one process and slowed the file down,
 * and one's late settlement could move the shared gas account's nonce under a later test.
 */
async function stopRunning(): Promise<void> {
  for (const r of running.splice(0).reverse()) {
    await r.server.close();
    await r.facilitator.stop();
    await r.store.close();
  }
}

afterEach(stopRunning);

afterAll(async () => {
  await stopRunning();
  await devnet?.stop();
});

describe("junk payments", { timeout: 120_000 }, () => {
  it("refuses forty zero-value payments from a key with no ETH or USD: no gas spent, nothing attributed to the payee", async () => {
    const f = await startFacilitator();
    const victim = devnet.accounts[2]!;
    const apiKey = await registerProvider(f.url, victim);
    const stranger = strangerAccount();
    const nonceBefore = await gasNonce();

    const answers = [];
    for (let i = 0; i < 40; i++) {
      const signedPayment = await signTestPayment(devnet, stranger, { payTo: victim.address, amount: 0n });
      answers.push(await post(`${f.url}/authorize`, { signedPayment }));
    }

    expect(answers.map((a) => a.status)).toEqual(Array(40).fill(422));
    expect(answers[0]!.body.error).toMatchObject({
      code: "AmountMismatch",
      details: { reason: "amount_below_minimum", minimum: "1" },
    });
    expect(await gasNonce()).toBe(nonceBefore);
    expect(await paymentsTo(f.store, victim.address)).toBe(0);
    expect(await eventsFor(f.store, victim.address)).toBe(0);
    expect(await analyticsCount(f.url, apiKey)).toBe(0);
  });

  it("refuses a payment the payer cannot cover before it is queued, with no payment.failed for the payee", async () => {
    const f = await startFacilitator();
    const victim = devnet.accounts[3]!;
    const stranger = strangerAccount();
    const nonceBefore = await gasNonce();
    const signedPayment = await signTestPayment(devnet, stranger, { payTo: victim.address, amount: 10_000n });
    const answer = await post(`${f.url}/authorize`, { signedPayment });
    expect(answer.status).toBe(402);
    expect(answer.body.error?.code).toBe("InsufficientFunds");
    expect(await gasNonce()).toBe(nonceBefore);
    expect(await paymentsTo(f.store, victim.address)).toBe(0);
    expect(await eventsFor(f.store, victim.address)).toBe(0);
  });

  it("enforces a configured minimum on /authorize and on /x402/settle alike, and publishes it", async () => {
    const f = await startFacilitator({ minAmount: 10_000n });
    const payee = devnet.accounts[4]!;
    const payer = devnet.accounts[1]!;

    const supported = (await (await fetch(`${f.url}/supported`)).json()) as {
      networks: { tokens: { minAmount?: string }[] }[];
    };
    expect(supported.networks[0]!.tokens[0]!.minAmount).toBe("10000");

    const below = await signTestPayment(devnet, payer, { payTo: payee.address, amount: 9_999n });
    const refused = await post(`${f.url}/authorize`, { signedPayment: below });
    expect(refused.status).toBe(422);
    expect(refused.body.error?.details).toMatchObject({ reason: "amount_below_minimum", minimum: "10000" });

    const atMinimum = await signTestPayment(devnet, payer, { payTo: payee.address, amount: 10_000n });
    expect((await post(`${f.url}/authorize`, { signedPayment: atMinimum })).status).toBe(200);

    // The same floor on the x402 endpoints, for a payload the standard x402 client signed.
    const x402Payer = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(x402Payer.address, { usd: 1_000_000n });
    const offer = x402Requirements(payee.address, 9_999n);
    const paymentPayload = await x402Payload(x402Payer, offer);
    const settle = await post(`${f.url}/x402/settle`, {
      x402Version: 2,
      paymentPayload,
      paymentRequirements: offer,
    });
    expect(settle.body).toMatchObject({
      success: false,
      errorReason: "invalid_exact_evm_payload_authorization_value_mismatch",
    });
    const verify = await post(`${f.url}/x402/verify`, {
      x402Version: 2,
      paymentPayload,
      paymentRequirements: offer,
    });
    expect(verify.body).toMatchObject({
      isValid: false,
      invalidReason: "invalid_exact_evm_payload_authorization_value_mismatch",
    });
    expect(await paymentsTo(f.store, payee.address)).toBe(1);
  });
});

describe("rate limits", { timeout: 120_000 }, () => {
  it("answers 429 RateLimited with Retry-After once a payer has spent its bucket, from any address", async () => {
    const f = await startFacilitator({ rateLimits: { perPayer: { capacity: 3, refillPerSecond: 0.01 } } });
    const payer = devnet.accounts[5]!;
    const payee = devnet.accounts[6]!;
    const answers = [];
    for (let i = 0; i < 4; i++) {
      const signedPayment = await signTestPayment(devnet, payer, { payTo: payee.address, amount: 1_000n });
      // A payer limit follows the key, not the address it connects from.
      answers.push(await post(`${f.url}/authorize`, { signedPayment }));
    }
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429]);
    expect(answers[3]!.body.error?.code).toBe("RateLimited");
    expect(Number(answers[3]!.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(await paymentsTo(f.store, payee.address)).toBe(3);
  });

  it("does not let a stranger spend another payer's bucket with payments it did not sign", async () => {
    const f = await startFacilitator({ rateLimits: { perPayer: { capacity: 2, refillPerSecond: 0.01 } } });
    const payer = devnet.accounts[5]!;
    const payee = devnet.accounts[6]!;
    const stranger = strangerAccount();
    for (let i = 0; i < 5; i++) {
      const forged = await signTestPayment(devnet, stranger, { payTo: payee.address, amount: 1_000n });
      forged.authorization.from = payer.address;
      const answer = await post(`${f.url}/authorize`, { signedPayment: forged });
      expect(answer.status).toBe(422);
      expect(answer.body.error?.code).toBe("InvalidSignature");
    }
    const signedPayment = await signTestPayment(devnet, payer, { payTo: payee.address, amount: 1_000n });
    expect((await post(`${f.url}/authorize`, { signedPayment })).status).toBe(200);
  });

  it("limits a client address on every costly endpoint, before the body is read", async () => {
    const f = await startFacilitator({ rateLimits: { perClient: { capacity: 3, refillPerSecond: 0.01 } } });
    const statuses = [];
    for (const path of ["/authorize", "/x402/verify", "/x402/settle", "/authorize", "/x402/settle"]) {
      statuses.push((await post(`${f.url}${path}`, "not json")).status);
    }
    expect(statuses).toEqual([400, 400, 400, 429, 429]);
    const limited = await post(`${f.url}/authorize`, "not json");
    expect(limited.body.error?.code).toBe("RateLimited");
    expect(Number(limited.retryAfter)).toBeGreaterThanOrEqual(1);
    // Free endpoints stay open.
    expect((await fetch(`${f.url}/supported`)).status).toBe(200);
  });

  it("believes X-Forwarded-For only from a configured proxy", async () => {
    const rule = { capacity: 1, refillPerSecond: 0.01 };
    const direct = await startFacilitator({ rateLimits: { perClient: rule } });
    const first = await post(`${direct.url}/authorize`, "{}", { "x-forwarded-for": "198.51.100.1" });
    const second = await post(`${direct.url}/authorize`, "{}", { "x-forwarded-for": "198.51.100.2" });
    expect([first.status, second.status]).toEqual([400, 429]);

    const proxied = await startFacilitator({
      rateLimits: { perClient: rule, trustedProxies: ["127.0.0.1"] },
    });
    const a = await post(`${proxied.url}/authorize`, "{}", { "x-forwarded-for": "198.51.100.1" });
    const b = await post(`${proxied.url}/authorize`, "{}", { "x-forwarded-for": "198.51.100.2" });
    const again = await post(`${proxied.url}/authorize`, "{}", {
      "x-forwarded-for": "9.9.9.9, 198.51.100.1",
    });
    expect([a.status, b.status, again.status]).toEqual([400, 400, 429]);
  });
});

describe("memo expiry", { timeout: 120_000 }, () => {
  it("refuses a payment whose memo has expired or expires before it could settle, and moves no money", async () => {
    const f = await startFacilitator();
    const payer = devnet.accounts[1]!;
    const payee = devnet.accounts[7]!;
    const nonceBefore = await gasNonce();
    const now = Math.floor(Date.now() / 1000);
    for (const expiresAt of [now - 120, now + 2]) {
      const memo = testMemo({ payTo: payee.address, amount: 5_000n, token: devnet.contracts.usd, expiresAt });
      // The authorization itself is valid for ten more minutes: only the gate's offer has run out.
      const signedPayment = await signTestPayment(devnet, payer, {
        payTo: payee.address,
        amount: 5_000n,
        memo,
      });
      const answer = await post(`${f.url}/authorize`, { signedPayment });
      expect(answer.status).toBe(422);
      expect(answer.body.error).toMatchObject({
        code: "AuthorizationExpired",
        details: { reason: "memo_expired", memoExpiresAt: expiresAt },
      });
    }
    expect(await gasNonce()).toBe(nonceBefore);
    expect(await paymentsTo(f.store, payee.address)).toBe(0);

    const fresh = testMemo({
      payTo: payee.address,
      amount: 5_000n,
      token: devnet.contracts.usd,
      expiresAt: now + 60,
    });
    const signedPayment = await signTestPayment(devnet, payer, {
      payTo: payee.address,
      amount: 5_000n,
      memo: fresh,
    });
    expect((await post(`${f.url}/authorize`, { signedPayment })).status).toBe(200);
  });
});

function x402Requirements(payTo: Address, amount: bigint): PaymentRequirements {
  return {
    scheme: "exact",
    network: devnet.network,
    amount: amount.toString(),
    asset: devnet.contracts.usd,
    payTo,
    maxTimeoutSeconds: 300,
    extra: { name: devnet.token.name, version: devnet.token.version },
  };
}

async function x402Payload(account: PrivateKeyAccount, offer: PaymentRequirements): Promise<PaymentPayload> {
  const client = new x402Client()
    .register(devnet.network, new ExactEvmClientScheme(account))
    .setSpendControls({ allowedAssets: [{ network: devnet.network, asset: offer.asset }] });
  return client.createPaymentPayload({
    x402Version: 2,
    resource: {
      url: `http://127.0.0.1/${randomBytes(4).toString("hex")}`,
      description: "x",
      mimeType: "text/plain",
    },
    accepts: [offer],
  });
}
