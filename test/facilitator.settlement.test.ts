import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { transferWithAuthorization } from "../src/chain/actions/usd/transferWithAuthorization.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitator } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { JwksSchema, PaymentRecordSchema } from "../src/protocol/facilitator.ts";
import { PaymentProofSchema } from "../src/protocol/paymentProof.ts";
import type { SignedPayment } from "../src/protocol/signedPayment.ts";
import { checkPaymentProof, checkSignatureWithKeys } from "../src/schemes/exact/gate/checkPaymentProof.ts";
import { createStaticKeyResolver } from "../src/schemes/exact/gate/proofKeyResolver.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  signTestPayment,
  startTestFacilitator,
  type TestFacilitator,
  testMemo,
  testMemoSecret,
} from "./support/facilitatorHarness.ts";
import { readPaymentAsPayer } from "./support/readPayment.ts";
import { startTcpProxy, type TcpProxy } from "./support/tcpProxy.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let payer: DevnetAccount;
let payTo: DevnetAccount;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 7 });
  tf = await startTestFacilitator(devnet);
  payer = devnet.accounts[1]!;
  payTo = devnet.accounts[2]!;
});

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

function authorize(signedPayment: unknown, url = tf.url) {
  return fetch(`${url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
}

async function balanceOf(address: `0x${string}`) {
  return getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: address });
}

async function errorOf(response: Response) {
  const body = (await response.json()) as { error: { code: string; message: string } };
  return { status: response.status, code: body.error.code };
}

/** A fresh key with test USD and no ETH: payers never need gas. */
async function fundedPayer(usd: bigint): Promise<DevnetAccount> {
  const privateKey = generatePrivateKey();
  const account = privateKeyToAccount(privateKey);
  if (usd > 0n) await devnet.fund(account.address, { usd });
  return { address: account.address, privateKey, account };
}

describe("POST /authorize", () => {
  it("settles a valid payment and returns a proof that verifies against the JWKS", async () => {
    const before = { payer: await balanceOf(payer.address), payTo: await balanceOf(payTo.address) };
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 500_000n });
    const response = await authorize(payment);
    expect(response.status).toBe(200);
    const body = (await response.json()) as { proof: unknown; settled: { transaction: string } };
    const proof = PaymentProofSchema.parse(body.proof);
    expect(proof.amount).toBe("500000");
    expect(proof.payer).toBe(payer.address);
    expect(proof.tx).toBe(body.settled.transaction);

    const jwks = JwksSchema.parse(await (await fetch(`${tf.url}/.well-known/jwks.json`)).json());
    const verdict = await checkPaymentProof(proof, {
      checkSignature: checkSignatureWithKeys(createStaticKeyResolver(jwks)),
      memoSecret: testMemoSecret,
      clock: systemClock,
      expected: {
        method: "GET",
        path: "/paid",
        payTo: payTo.address,
        network: devnet.network,
        token: devnet.contracts.usd,
      },
    });
    expect(verdict).toMatchObject({ valid: true });

    const verify = await fetch(`${tf.url}/verify`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ proof }),
    });
    expect(await verify.json()).toEqual({ valid: true });

    expect(await balanceOf(payer.address)).toBe(before.payer - 500_000n);
    expect(await balanceOf(payTo.address)).toBe(before.payTo + 500_000n);
  });

  it("returns the same proof for the same signed payment sent twice at once, settling it once", async () => {
    const before = await balanceOf(payer.address);
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 250_000n });
    const [a, b] = await Promise.all([authorize(payment), authorize(payment)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    const [pa, pb] = [(await a.json()) as { proof: unknown }, (await b.json()) as { proof: unknown }];
    expect(pa.proof).toEqual(pb.proof);
    const again = (await (await authorize(payment)).json()) as { proof: unknown };
    expect(again.proof).toEqual(pa.proof);
    expect(await balanceOf(payer.address)).toBe(before - 250_000n);
  });

  it("settles 50 concurrent payments from 50 payers in fewer transactions than payments", async () => {
    const payers: DevnetAccount[] = [];
    for (let i = 0; i < 50; i++) payers.push(await fundedPayer(1_000_000n));
    const payments = await Promise.all(
      payers.map((p) => signTestPayment(devnet, p, { payTo: payTo.address, amount: 100_000n })),
    );
    const before = await balanceOf(payTo.address);
    const responses = await Promise.all(payments.map((p) => authorize(p)));
    expect(responses.map((r) => r.status)).toEqual(payments.map(() => 200));
    const bodies = (await Promise.all(responses.map((r) => r.json()))) as {
      settled: { transaction: string };
    }[];
    const transactions = new Set(bodies.map((b) => b.settled.transaction));
    expect(transactions.size).toBeLessThan(payments.length);
    expect(await balanceOf(payTo.address)).toBe(before + 50n * 100_000n);
    for (const p of payers) expect(await balanceOf(p.address)).toBe(900_000n);
  }, 120_000);
});

describe("POST /authorize refusals", () => {
  let signed: SignedPayment;
  beforeAll(async () => {
    signed = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 10_000n });
  });

  it("answers 400 InvalidRequest to a body that is not JSON or not a signed payment", async () => {
    const notJson = await fetch(`${tf.url}/authorize`, { method: "POST", body: "{nope" });
    expect(await errorOf(notJson)).toEqual({ status: 400, code: "InvalidRequest" });
    expect(await errorOf(await authorize({ ...signed, signature: "0x1234" }))).toEqual({
      status: 400,
      code: "InvalidRequest",
    });
    expect(await errorOf(await authorize(null))).toEqual({ status: 400, code: "InvalidRequest" });
  });

  it("answers 413 to a body over the size limit", async () => {
    const response = await fetch(`${tf.url}/authorize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ padding: "x".repeat(200_000) }),
    });
    expect(await errorOf(response)).toEqual({ status: 413, code: "PayloadTooLarge" });
    // The unread rest of the body leaves the connection unusable: the client is told not to reuse it.
    expect(response.headers.get("connection")).toBe("close");
  });

  it("answers 422 UnsupportedNetwork and UnsupportedToken", async () => {
    expect(await errorOf(await authorize({ ...signed, network: "eip155:8453" }))).toEqual({
      status: 422,
      code: "UnsupportedNetwork",
    });
    expect(await errorOf(await authorize({ ...signed, token: payTo.address }))).toEqual({
      status: 422,
      code: "UnsupportedToken",
    });
  });

  it("refuses a nonce that is not keccak256(memo)", async () => {
    const other = testMemo({ payTo: payTo.address, amount: 10_000n, token: devnet.contracts.usd });
    expect(await errorOf(await authorize({ ...signed, memo: other }))).toEqual({
      status: 400,
      code: "InvalidRequest",
    });
  });

  it("answers 422 AmountMismatch when the transfer does not pay what the memo priced", async () => {
    const payment = await signTestPayment(devnet, payer, {
      payTo: payTo.address,
      amount: 10_000n,
      value: 9_999n,
    });
    expect(await errorOf(await authorize(payment))).toEqual({ status: 422, code: "AmountMismatch" });
  });

  it("answers 422 InvalidSignature to a signature by another key, for another chain, or with a high s", async () => {
    const forged = await signTestPayment(devnet, devnet.accounts[3]!, {
      payTo: payTo.address,
      amount: 10_000n,
    });
    const wrongSigner = { ...forged, authorization: { ...forged.authorization, from: payer.address } };
    expect(await errorOf(await authorize(wrongSigner))).toEqual({ status: 422, code: "InvalidSignature" });

    const otherChain = await signTestPayment(devnet, payer, {
      payTo: payTo.address,
      amount: 10_000n,
      chainId: 8453,
    });
    expect(await errorOf(await authorize(otherChain))).toEqual({ status: 422, code: "InvalidSignature" });

    // The same signature with s' = n - s and v flipped recovers the same key: refused as malleable.
    const n = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;
    const good = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 10_000n });
    const sig = good.signature;
    const s = BigInt(`0x${sig.slice(66, 130)}`);
    const v = Number.parseInt(sig.slice(130, 132), 16);
    const highS = `${sig.slice(0, 66)}${(n - s).toString(16).padStart(64, "0")}${(v === 27 ? 28 : 27).toString(16)}`;
    expect(await errorOf(await authorize({ ...good, signature: highS }))).toEqual({
      status: 422,
      code: "InvalidSignature",
    });
  });

  it("answers 422 AuthorizationExpired outside the validity window", async () => {
    const now = BigInt(Math.floor(Date.now() / 1000));
    const expired = await signTestPayment(devnet, payer, {
      payTo: payTo.address,
      amount: 10_000n,
      validAfter: now - 600n,
      validBefore: now - 1n,
    });
    expect(await errorOf(await authorize(expired))).toEqual({ status: 422, code: "AuthorizationExpired" });
    const early = await signTestPayment(devnet, payer, {
      payTo: payTo.address,
      amount: 10_000n,
      validAfter: now + 3600n,
      validBefore: now + 7200n,
    });
    expect(await errorOf(await authorize(early))).toEqual({ status: 422, code: "AuthorizationExpired" });
  });

  it("answers 402 InsufficientFunds when the payer's balance is short, and settles once funded", async () => {
    const poor = await fundedPayer(0n);
    const payment = await signTestPayment(devnet, poor, { payTo: payTo.address, amount: 10_000n });
    expect(await errorOf(await authorize(payment))).toEqual({ status: 402, code: "InsufficientFunds" });
    await devnet.fund(poor.address, { usd: 10_000n });
    expect((await authorize(payment)).status).toBe(200);
    expect(await balanceOf(poor.address)).toBe(0n);
  });

  it("answers 409 NonceAlreadyUsed when the authorization was already used on chain by someone else", async () => {
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 10_000n });
    const a = payment.authorization;
    const hash = await transferWithAuthorization(devnet.walletClient(devnet.accounts[4]!), {
      token: devnet.contracts.usd,
      authorization: {
        from: a.from,
        to: a.to,
        value: BigInt(a.value),
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
        nonce: a.nonce,
      },
      signature: payment.signature,
    });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
    expect(await errorOf(await authorize(payment))).toEqual({ status: 409, code: "NonceAlreadyUsed" });
  });

  it("answers 409 NonceAlreadyUsed to a different payment reusing a settled nonce", async () => {
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 10_000n });
    expect((await authorize(payment)).status).toBe(200);
    const other = await signTestPayment(devnet, payer, {
      payTo: payTo.address,
      amount: 10_000n,
      memo: payment.memo,
      validBefore: BigInt(payment.authorization.validBefore) - 1n,
    });
    expect(await errorOf(await authorize(other))).toEqual({ status: 409, code: "NonceAlreadyUsed" });
  });
});

describe("service endpoints", () => {
  it("serves /supported, /healthz, /metrics and an OpenAPI document", async () => {
    const supported = (await (await fetch(`${tf.url}/supported`)).json()) as {
      networks: { network: string }[];
    };
    expect(supported.networks[0]?.network).toBe("eip155:31337");
    const health = await fetch(`${tf.url}/healthz`);
    expect(health.status).toBe(200);
    const metrics = await (await fetch(`${tf.url}/metrics`)).text();
    expect(metrics).toMatch(/tollgate_payments_settled_total\{token="0x[0-9a-f]{40}"\} [1-9]/);
    expect(metrics).toMatch(/tollgate_settlement_batch_size_count [1-9]/);
    const openapi = (await (await fetch(`${tf.url}/openapi.json`)).json()) as {
      paths: Record<string, unknown>;
    };
    expect(Object.keys(openapi.paths)).toContain("/authorize");
  });

  it("documents every endpoint of the core service, x402 included, in its OpenAPI document", async () => {
    // The same service without the subscription, usage, webhook and analytics modules.
    const core = createFacilitator({
      store: tf.store,
      publicClient: devnet.publicClient,
      network: devnet.network,
      gasAccount: payer.account,
      proofKeys: [generateProofKey().key],
      batchSettler: devnet.contracts.batchSettler,
      tokens: [
        {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
          symbol: "USDC",
          decimals: 6,
        },
      ],
      builtinModules: false,
    });
    const served = core.app.routes
      .filter((r) => r.method !== "ALL")
      .map((r) => `${r.method.toLowerCase()} ${r.path}`);
    expect(served).toContain("post /x402/settle");
    const doc = (await (await fetch(`${tf.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, unknown>>;
      components: { schemas: Record<string, { properties?: Record<string, unknown> }> };
    };
    const documented = Object.entries(doc.paths).flatMap(([path, methods]) =>
      Object.keys(methods).map((m) => `${m} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
    );
    expect(served.filter((r) => !documented.includes(r))).toEqual([]);
    expect(Object.keys(doc.components.schemas.AuthorizeRequest?.properties ?? {})).toEqual(["signedPayment"]);
    expect(Object.keys(doc.components.schemas.X402SettleRequest?.properties ?? {})).toContain(
      "paymentPayload",
    );
  });

  it("answers GET /payments/:nonce to the payer with the record in its published schema, checksummed", async () => {
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 15_000n });
    const { proof } = (await (await authorize(payment)).json()) as { proof: unknown };
    const response = await readPaymentAsPayer(tf.url, payment.authorization.nonce, payer.account);
    const record = PaymentRecordSchema.parse(await response.json());
    expect(record).toMatchObject({
      status: "settled",
      payer: payer.address,
      payTo: payTo.address,
      token: devnet.contracts.usd,
      amount: "15000",
      proof,
    });
    expect(await errorOf(await fetch(`${tf.url}/payments/0x1234`))).toEqual({
      status: 400,
      code: "InvalidRequest",
    });
    expect(await errorOf(await readPaymentAsPayer(tf.url, `0x${"ab".repeat(32)}`, payer.account))).toEqual({
      status: 404,
      code: "NotFound",
    });
  });

  it("answers 404 with a structured body for an unknown endpoint", async () => {
    expect(await errorOf(await fetch(`${tf.url}/nope`))).toEqual({ status: 404, code: "NotFound" });
  });
});

describe("proof key rotation", () => {
  // One store across the facilitators started in turn, as across a restart with new keys.
  let store: Store;
  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  });
  afterAll(async () => {
    await store?.close();
  });

  async function jwksAt(url: string) {
    return JwksSchema.parse(await (await fetch(`${url}/.well-known/jwks.json`)).json());
  }
  async function gateAccepts(proof: unknown, jwks: unknown) {
    return checkPaymentProof(PaymentProofSchema.parse(proof), {
      checkSignature: checkSignatureWithKeys(createStaticKeyResolver(JwksSchema.parse(jwks))),
      memoSecret: testMemoSecret,
      clock: systemClock,
      expected: {
        method: "GET",
        path: "/paid",
        payTo: payTo.address,
        network: devnet.network,
        token: devnet.contracts.usd,
      },
    });
  }
  async function verifyAt(url: string, proof: unknown) {
    const response = await fetch(`${url}/verify`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ proof }),
    });
    return response.json();
  }

  it("signs with a newly added key while proofs of the old key keep verifying until it is retired", async () => {
    const [oldKey, newKey] = [generateProofKey().key, generateProofKey().key];
    const gasAccount = devnet.accounts[5]!;
    // Before the rotation: one key.
    const before = await startTestFacilitator(devnet, { store, gasAccount, proofKeys: [oldKey] });
    const first = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 20_000n });
    const oldProof = ((await (await authorize(first, before.url)).json()) as { proof: { kid: string } })
      .proof;
    expect(oldProof.kid).toBe(oldKey.kid);
    await before.stop();

    // Rotation: the new key signs, the old one stays published for the proofs it signed.
    const rotated = await startTestFacilitator(devnet, { store, gasAccount, proofKeys: [newKey, oldKey] });
    try {
      const jwks = await jwksAt(rotated.url);
      expect(jwks.keys.map((k) => k.kid)).toEqual([newKey.kid, oldKey.kid]);
      const second = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 20_000n });
      const newProof = ((await (await authorize(second, rotated.url)).json()) as { proof: { kid: string } })
        .proof;
      expect(newProof.kid).toBe(newKey.kid);
      expect(await gateAccepts(newProof, jwks)).toMatchObject({ valid: true });
      expect(await gateAccepts(oldProof, jwks)).toMatchObject({ valid: true });
      expect(await verifyAt(rotated.url, oldProof)).toEqual({ valid: true });
      expect(await verifyAt(rotated.url, newProof)).toEqual({ valid: true });
      // The payment settled before the rotation still answers with its original proof.
      expect(((await (await authorize(first, rotated.url)).json()) as { proof: unknown }).proof).toEqual(
        oldProof,
      );
    } finally {
      await rotated.stop();
    }

    // Retired: the old key is gone from the JWKS, and its proofs no longer verify.
    const retired = await startTestFacilitator(devnet, { store, gasAccount, proofKeys: [newKey] });
    try {
      const jwks = await jwksAt(retired.url);
      expect(jwks.keys.map((k) => k.kid)).toEqual([newKey.kid]);
      expect(await verifyAt(retired.url, oldProof)).toEqual({ valid: false, reason: "unknown_kid" });
      expect(await gateAccepts(oldProof, jwks)).toMatchObject({ valid: false });
    } finally {
      await retired.stop();
    }
  }, 120_000); // three facilitator start-ups in turn
});

describe("when the chain RPC goes away", () => {
  let proxy: TcpProxy;
  let viaProxy: TestFacilitator;

  beforeAll(async () => {
    const url = new URL(devnet.rpcUrl);
    proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
    viaProxy = await startTestFacilitator(devnet, {
      rpcUrl: proxy.url,
      gasAccount: devnet.accounts[4]!,
      settlement: { authorizeTimeoutMs: 3_000, reconcileIntervalMs: 100 },
    });
  });

  afterAll(async () => {
    await viaProxy?.stop();
    await proxy?.close();
  });

  it("answers 503 ChainUnavailable with Retry-After, and the same payment settles once it is back", async () => {
    const before = await balanceOf(payer.address);
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 30_000n });
    await proxy.cut();
    const down = await authorize(payment, viaProxy.url);
    expect(down.status).toBe(503);
    expect(down.headers.get("retry-after")).toMatch(/^\d+$/);
    expect((await errorOf(down)).code).toBe("ChainUnavailable");
    const health = await fetch(`${viaProxy.url}/healthz`);
    expect(health.status).toBe(503);

    await proxy.restore();
    const up = await authorize(payment, viaProxy.url);
    expect(up.status).toBe(200);
    expect(await balanceOf(payer.address)).toBe(before - 30_000n);
  });

  it("answers a payment it already settled from its record while the chain is unreachable", async () => {
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 20_000n });
    const first = await authorize(payment, viaProxy.url);
    expect(first.status).toBe(200);
    const { proof } = (await first.json()) as { proof: unknown };
    // A new payment is simulated before any store read; for one already recorded, the chain's answer
    // (here: none) gives way to the record.
    await proxy.cut();
    try {
      const again = await authorize(payment, viaProxy.url);
      expect(again.status).toBe(200);
      expect(((await again.json()) as { proof: unknown }).proof).toEqual(proof);
    } finally {
      await proxy.restore();
    }
  });
});
