/**
 * Who may read proofs: proofs are bearer credentials until a gate consumes them, and memos say what a
 * payer bought. The facilitator handed both to anyone: `GET /payments/:nonce` returned the proof with
 * no credentials (the nonce is public on chain once settled), and `GET /events` listed every settled
 * payment with its memo. An observer raced payers to the gate with their own proofs.
 *
 * Now only the payer (a signed read) and the payee (its provider API key) read a payment, and the event
 * feed is per provider, behind its key. Over a real facilitator on a real devnet.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import type { Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer } from "../../src/client/createPayer.ts";
import { fetchWithPayment } from "../../src/client/fetchWithPayment.ts";
import { paymentPath } from "../../src/client/getPayment.ts";
import { payerReadHeaders } from "../../src/client/payerReadHeaders.ts";
import { registerProvider } from "../../src/client/registerProvider.ts";
import { serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../../src/http/facilitatorClient.ts";
import { PaymentRecordSchema } from "../../src/protocol/facilitator.ts";
import { decodeJsonHeader } from "../../src/protocol/header.ts";
import { memoNonce } from "../../src/protocol/memo.ts";
import { type PaymentProof, PaymentProofSchema } from "../../src/protocol/paymentProof.ts";
import type { SignedPayment } from "../../src/protocol/signedPayment.ts";
import { EventFeedResponseSchema, type FeedEvent } from "../../src/protocol/subscriptions.ts";
import {
  signTestPayment,
  startTestFacilitator,
  type TestFacilitator,
  testMemo,
} from "../support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let payer: DevnetAccount;
let payee: DevnetAccount;
let payeeKey: string;
/** Another provider with a key of its own: a stranger as far as this payment goes. */
let otherKey: string;
let payment: SignedPayment;
let proof: PaymentProof;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  payer = devnet.accounts[1]!;
  payee = devnet.accounts[2]!;
  const client = createFacilitatorClient({ url: tf.url, fetch });
  payeeKey = (await registerProvider(client, payee.account)).apiKey;
  otherKey = (await registerProvider(client, privateKeyToAccount(generatePrivateKey()))).apiKey;
  payment = await signTestPayment(devnet, payer, { payTo: payee.address, amount: 20_000n });
  proof = await authorize(payment);
}, 120_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

async function authorize(signed: SignedPayment): Promise<PaymentProof> {
  const response = await fetch(`${tf.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment: signed }),
  });
  expect(response.status).toBe(200);
  return PaymentProofSchema.parse(((await response.json()) as { proof: unknown }).proof);
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

async function read(nonce: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${tf.url}${paymentPath(nonce)}`, { headers });
  return { status: response.status, text: await response.text() };
}

/** Everything the feed serves to `headers` right now, from the start. */
async function feed(headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const response = await fetch(`${tf.url}/events?limit=1000`, { headers });
  return { status: response.status, text: await response.text() };
}

/** The payee's `payment.settled` event for the payment, once the feed serves it (bounded). */
async function settledEventFor(nonce: Hex): Promise<FeedEvent | undefined> {
  for (let i = 0; i < 50; i++) {
    const { text } = await feed(bearer(payeeKey));
    const found = EventFeedResponseSchema.parse(JSON.parse(text)).events.find(
      (e) => e.type === "payment.settled" && e.data.nonce === nonce,
    );
    if (found !== undefined) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return undefined;
}

describe("reading a payment back", () => {
  it("does not hand a settled payment's proof or memo to a request without credentials", async () => {
    const { status, text } = await read(payment.authorization.nonce);
    expect(status).toBe(401);
    expect(JSON.parse(text)).toMatchObject({ error: { code: "Unauthorized" } });
    expect(text).not.toContain(proof.sig);
    expect(text).not.toContain(payment.memo);
  });

  it("answers a stranger's signed read and another provider's key as it answers an unknown nonce", async () => {
    const stranger = privateKeyToAccount(generatePrivateKey());
    const path = paymentPath(payment.authorization.nonce);
    for (const headers of [await payerReadHeaders(stranger, { method: "GET", path }), bearer(otherKey)]) {
      const { status, text } = await read(payment.authorization.nonce, headers);
      expect(status).toBe(404);
      expect(text).not.toContain(proof.sig);
    }
  });

  it("serves the payment and its proof to the payer (a signed read) and to the payee (its API key)", async () => {
    const asPayer = createPayer({
      account: payer.account,
      network: devnet.network,
      facilitator: tf.url,
      fetch,
    });
    const record = await asPayer.payment(payment.authorization.nonce);
    expect(record).toMatchObject({ status: "settled", payer: payer.address, payTo: payee.address, proof });

    const { status, text } = await read(payment.authorization.nonce, bearer(payeeKey));
    expect(status).toBe(200);
    expect(PaymentRecordSchema.parse(JSON.parse(text)).proof).toEqual(proof);
  });

  it("refuses the payer's read signed for another payment, too long ago, or in the future", async () => {
    const second = await signTestPayment(devnet, payer, { payTo: payee.address, amount: 20_000n });
    await authorize(second);
    // A header captured from a read of one payment does not open another one.
    const forFirst = await payerReadHeaders(payer.account, {
      method: "GET",
      path: paymentPath(payment.authorization.nonce),
    });
    expect((await read(second.authorization.nonce, forFirst)).status).toBe(404);

    const path = paymentPath(second.authorization.nonce);
    for (const offsetMs of [-120_000, 120_000]) {
      const skewed = { now: () => Date.now() + offsetMs };
      const headers = await payerReadHeaders(payer.account, { method: "GET", path }, skewed);
      const { status, text } = await read(second.authorization.nonce, headers);
      expect(status).toBe(401);
      expect(text).not.toContain(second.memo);
    }
  });
});

describe("the event feed", () => {
  it("refuses a request without a provider key, and serves a key only its own provider's events", async () => {
    const event = await settledEventFor(payment.authorization.nonce);
    // The payee sees its payment with the memo it issued.
    expect(event?.data).toMatchObject({ payTo: payee.address.toLowerCase(), memo: payment.memo });

    const anonymous = await feed({});
    expect(anonymous.status).toBe(401);
    expect(anonymous.text).not.toContain(payment.memo);

    const other = await feed(bearer(otherKey));
    expect(other.status).toBe(200);
    expect(other.text).not.toContain(payment.memo);
    expect(other.text).not.toContain(payment.authorization.nonce);

    const named = await fetch(`${tf.url}/events?provider=${payee.address}`, { headers: bearer(otherKey) });
    expect(named.status).toBe(401);
  });
});

describe("what an observer of the chain has", () => {
  it("cannot get the proof by re-posting the settled authorization without its memo", async () => {
    // The authorization and signature are public once settled (the settlement transaction's input);
    // the memo never goes on chain, and without it /authorize will not answer with the proof.
    const tx = await devnet.publicClient.getTransaction({ hash: proof.tx });
    expect(tx.input.toLowerCase()).toContain(payment.signature.slice(2, 66).toLowerCase());
    expect(tx.input.toLowerCase()).not.toContain(Buffer.from(payment.memo, "utf8").toString("hex"));

    const ownMemo = testMemo({ payTo: payee.address, amount: 20_000n, token: devnet.contracts.usd });
    expect(memoNonce(ownMemo)).not.toBe(payment.authorization.nonce);
    const response = await fetch(`${tf.url}/authorize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ signedPayment: { ...payment, memo: ownMemo } }),
    });
    expect(response.status).toBe(400);
    expect(await response.text()).not.toContain(proof.sig);
  });
});

describe("the race an observer ran against payers", () => {
  it("leaves an observer nothing to redeem at the gate, so the payer is served and pays once", async () => {
    const gate = paymentGate({
      payTo: payee.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: tf.url,
      fetch,
      memoSecret: randomBytes(32),
      routes: { "GET /api/report": { amount: 40_000n } },
    });
    const api = new Hono<PaymentGateEnv>();
    api.use("/api/*", honoPaymentGate(gate));
    api.get("/api/report", (c) => c.json({ report: "quarterly", paidBy: c.get("payment")?.payer }));
    const server = await serveApp(api);
    const victim = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(victim.address, { usd: 1_000_000n });
    const balance = () =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: victim.address });
    const before = await balance();
    const observed: { events: number; payment: number; gate?: number } = { events: 0, payment: 0 };
    try {
      // Between the payer's /authorize and its paid request, the observer does what the review did:
      // read the feed and the payment (the nonce is public on chain once settled), and present the
      // proof at the gate first.
      const racingFetch: typeof fetch = async (input, init) => {
        const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
        const header = headers.get("X-PAYMENT");
        if (header !== null && observed.gate === undefined) {
          const { memo } = decodeJsonHeader(header, PaymentProofSchema);
          observed.events = (await fetch(`${tf.url}/events?types=payment.settled&limit=1000`)).status;
          const record = await fetch(`${tf.url}${paymentPath(memoNonce(memo))}`);
          observed.payment = record.status;
          const stolen = record.ok ? PaymentRecordSchema.parse(await record.json()).proof : undefined;
          observed.gate = 0;
          if (stolen !== undefined) {
            const raced = await fetch(`${server.url}/api/report`, {
              headers: { "X-PAYMENT": Buffer.from(JSON.stringify(stolen)).toString("base64") },
            });
            observed.gate = raced.status;
          }
        }
        return fetch(input, init);
      };
      const payments: unknown[] = [];
      const asVictim = createPayer({ account: victim, network: devnet.network, facilitator: tf.url, fetch });
      const paid = fetchWithPayment(racingFetch, asVictim, {
        maxPrice: "0.10",
        onPayment: (receipt) => {
          payments.push(receipt);
        },
      });
      const response = await paid(`${server.url}/api/report`);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ report: "quarterly", paidBy: victim.address });
      expect(observed).toEqual({ events: 401, payment: 401, gate: 0 });
      expect(payments).toHaveLength(1);
      expect(before - (await balance())).toBe(40_000n);
    } finally {
      await server.close();
      await gate.close();
    }
  });
});
