/**
 * One transfer buys one response, whatever scheme presents it.
 *
 * The EIP-3009 authorization and signature of every settled payment are public on chain (they are the
 * calldata of the facilitator's BatchSettler transaction). Wrapped in an x402 `PAYMENT-SIGNATURE`, a
 * payment already served was served again — by its own gate, because the gate keyed x402 replays apart
 * from memo replays, and by any other gate with the same payTo and price, because `/x402/settle`
 * answered success for any authorization it had settled before.
 *
 * Now the gate keys both schemes on the authorization and consumes the key before settling, and the
 * facilitator answers a settlement only to the x402 request that made it. Over a real devnet, a real
 * facilitator on a socket, and gates (Hono) on sockets, each with its own memo secret and replay guard
 * unless a test says otherwise.
 */
import { randomBytes } from "node:crypto";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { x402Client } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  encodePaymentSignatureHeader,
  HTTPFacilitatorClient,
} from "@x402/core/http";
import type { PaymentPayload, PaymentRequired, PaymentRequirements } from "@x402/core/types";
import { ExactEvmScheme as ExactEvmClientScheme } from "@x402/evm/exact/client";
import { ExactEvmScheme as ExactEvmServerScheme } from "@x402/evm/exact/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { wrapFetchWithPayment } from "@x402/fetch";
import express from "express";
import { Hono } from "hono";
import {
  type Address,
  decodeFunctionData,
  type Hash,
  type Hex,
  type PrivateKeyAccount,
  parseAbi,
} from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer } from "../../src/client/createPayer.ts";
import type { PaymentReceipt } from "../../src/client/payerTypes.ts";
import { type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";
import { memoNonce } from "../../src/protocol/memo.ts";
import { PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { createPostgresReplayGuard } from "../../src/store/createPostgresReplayGuard.ts";
import type { ReplayGuard } from "../../src/store/replayGuard.ts";
import { startTestFacilitator, type TestFacilitator } from "../support/facilitatorHarness.ts";

const NETWORK = "eip155:31337" as const;
/** 0.50: the price of every gate here, well above any minimum the facilitator sets. */
const PRICE = 500_000n;
const NONCE_USED = "invalid_exact_evm_nonce_already_used";

/** The facilitator's settlement call, as anyone reading the chain decodes it. */
const settleAbi = parseAbi([
  "function settle(address token, (address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)[] items) returns (bool[])",
]);

type Gate = {
  url: string;
  /** The payer of every request its handler ran for. */
  runs: string[];
};

let devnet: Devnet;
let tf: TestFacilitator;
let payTo: Address;
const servers: RunningServer[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  payTo = devnet.accounts[2]!.address;
}, 120_000);

afterAll(async () => {
  await Promise.all(servers.map((server) => server.close()));
  await tf?.stop();
  await devnet?.stop();
});

/** A paid API at 0.50 to `payTo`; another gate unless it is given this one's secret and replay guard. */
async function startGate(
  options: { memoSecret?: Uint8Array<ArrayBuffer>; replayGuard?: ReplayGuard } = {},
): Promise<Gate> {
  const runs: string[] = [];
  const app = new Hono<PaymentGateEnv>();
  app.use(
    "/api/*",
    honoPaymentGate(
      paymentGate({
        payTo,
        network: NETWORK,
        token: devnet.contracts.usd,
        facilitator: tf.url,
        memoSecret: options.memoSecret ?? randomBytes(32),
        ...(options.replayGuard === undefined ? {} : { replayGuard: options.replayGuard }),
        routes: { "GET /api/report": { amount: PRICE, description: "one report" } },
      }),
    ),
  );
  app.get("/api/report", (c) => {
    runs.push(c.get("payment")?.payer ?? "nobody");
    return c.json({ report: "the numbers" });
  });
  const server = await serveApp(app);
  servers.push(server);
  return { url: `${server.url}/api/report`, runs };
}

/** A fresh payer key holding `usd` test USD and no ETH. */
async function freshAccount(usd: bigint): Promise<PrivateKeyAccount> {
  const account = privateKeyToAccount(generatePrivateKey());
  if (usd > 0n) await devnet.fund(account.address, { usd });
  return account;
}

function balanceOf(owner: Address): Promise<bigint> {
  return getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
}

/** A gate's 402: its Tollgate option and its x402 `PAYMENT-REQUIRED`. */
async function offerOf(gate: Gate) {
  const response = await fetch(gate.url);
  expect(response.status).toBe(402);
  const option = PaymentRequiredSchema.parse(await response.json()).accepts[0]!;
  const x402: PaymentRequired = decodePaymentRequiredHeader(response.headers.get("PAYMENT-REQUIRED") ?? "");
  return { option, x402 };
}

/** Pays a gate's offer through the Tollgate proof path (`/authorize`) without presenting the proof yet. */
async function payTollgate(gate: Gate, account: PrivateKeyAccount): Promise<PaymentReceipt> {
  const payer = createPayer({ account, network: NETWORK, facilitator: tf.url, fetch });
  const { option } = await offerOf(gate);
  return payer.pay(option, { maxAmount: PRICE });
}

/** What an observer of the chain learns: the authorization and signature with `nonce`, from the calldata. */
async function authorizationOnChain(transaction: Hex, nonce: Hex) {
  const tx = await devnet.publicClient.getTransaction({ hash: transaction as Hash });
  const { args } = decodeFunctionData({ abi: settleAbi, data: tx.input });
  const item = args[1].find((candidate) => candidate.nonce.toLowerCase() === nonce.toLowerCase());
  if (item === undefined) throw new Error("the settlement transaction does not carry this nonce");
  return {
    authorization: {
      from: item.from,
      to: item.to,
      value: item.value.toString(),
      validAfter: item.validAfter.toString(),
      validBefore: item.validBefore.toString(),
      nonce: item.nonce,
    },
    signature: item.signature,
  };
}

/** The authorization wrapped in a `PAYMENT-SIGNATURE` for `gate`'s current 402, as a standard client would. */
async function asX402Header(gate: Gate, exact: Awaited<ReturnType<typeof authorizationOnChain>>) {
  const { x402 } = await offerOf(gate);
  const payload: PaymentPayload = {
    x402Version: 2,
    resource: x402.resource,
    accepted: x402.accepts[0]!,
    payload: exact,
  };
  return encodePaymentSignatureHeader(payload);
}

async function expectRefused(response: Response) {
  expect(response.status).toBe(402);
  expect(decodePaymentRequiredHeader(response.headers.get("PAYMENT-REQUIRED") ?? "").error).toBe(NONCE_USED);
}

function sendX402(gate: Gate, header: string) {
  return fetch(gate.url, { headers: { "PAYMENT-SIGNATURE": header } });
}

/** A standard x402 client (`@x402/fetch` with `@x402/evm`'s exact scheme) for `account`. */
function standardClient(account: PrivateKeyAccount): x402Client {
  return new x402Client()
    .register(NETWORK, new ExactEvmClientScheme(account))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: devnet.contracts.usd }] });
}

describe("a settled Tollgate payment re-sent as an x402 payment", () => {
  it("is refused at its own gate and at another gate with the same payTo and price, the handler not run", async () => {
    const gateA = await startGate();
    const gateB = await startGate();
    const account = await freshAccount(PRICE);
    const receipt = await payTollgate(gateA, account);
    const served = await fetch(gateA.url, { headers: { "X-PAYMENT": receipt.header } });
    expect(served.status).toBe(200);
    expect(gateA.runs).toEqual([account.address]);
    const before = await balanceOf(payTo);

    // An observer reads the authorization back from the settlement transaction on chain.
    const stolen = await authorizationOnChain(receipt.proof.tx, memoNonce(receipt.proof.memo));
    expect(stolen.authorization.from).toBe(account.address);
    for (const gate of [gateA, gateB]) {
      await expectRefused(await sendX402(gate, await asX402Header(gate, stolen)));
    }
    expect(gateA.runs).toHaveLength(1);
    expect(gateB.runs).toHaveLength(0);
    expect(await balanceOf(payTo)).toBe(before);
  });

  it("does not use up the payer's proof when a stranger presents it first", async () => {
    const gate = await startGate();
    const other = await startGate();
    const account = await freshAccount(PRICE);
    const receipt = await payTollgate(gate, account);
    const stolen = await authorizationOnChain(receipt.proof.tx, memoNonce(receipt.proof.memo));

    await expectRefused(await sendX402(gate, await asX402Header(gate, stolen)));
    await expectRefused(await sendX402(other, await asX402Header(other, stolen)));
    expect(gate.runs).toHaveLength(0);

    // The payer comes with the proof it paid for and is served, once.
    expect((await fetch(gate.url, { headers: { "X-PAYMENT": receipt.header } })).status).toBe(200);
    expect((await fetch(gate.url, { headers: { "X-PAYMENT": receipt.header } })).status).toBe(402);
    expect(gate.runs).toEqual([account.address]);
    expect(other.runs).toHaveLength(0);
  });

  it("is refused by the facilitator's /x402/settle and /x402/verify", async () => {
    const gate = await startGate();
    const account = await freshAccount(PRICE);
    const receipt = await payTollgate(gate, account);
    const stolen = await authorizationOnChain(receipt.proof.tx, memoNonce(receipt.proof.memo));
    const { x402 } = await offerOf(gate);
    const payload: PaymentPayload = {
      x402Version: 2,
      resource: x402.resource,
      accepted: x402.accepts[0]!,
      payload: stolen,
    };
    const facilitator = new HTTPFacilitatorClient({ url: `${tf.url}/x402` });
    expect(await facilitator.settle(payload, payload.accepted)).toMatchObject({
      success: false,
      errorReason: NONCE_USED,
      transaction: "",
    });
    expect(await facilitator.verify(payload, payload.accepted)).toMatchObject({
      isValid: false,
      invalidReason: NONCE_USED,
    });
  });
});

describe("an x402 payment re-sent", () => {
  it("is refused at another gate with the same payTo and price, the handler not run", async () => {
    const gateA = await startGate();
    const gateB = await startGate();
    const account = await freshAccount(PRICE);
    const sent: string[] = [];
    const recording: typeof fetch = async (input, init) => {
      const request = new Request(input, init);
      const header = request.headers.get("PAYMENT-SIGNATURE");
      if (header !== null) sent.push(header);
      return fetch(request);
    };
    const paid = await wrapFetchWithPayment(recording, standardClient(account))(gateA.url);
    expect(paid.status).toBe(200);
    expect(sent).toHaveLength(1);
    expect(gateA.runs).toEqual([account.address]);

    // The header as it was sent, and the authorization re-wrapped for gate B's own 402.
    await expectRefused(await sendX402(gateB, sent[0]!));
    const payload = JSON.parse(Buffer.from(sent[0]!, "base64").toString("utf8")) as PaymentPayload;
    const rewrapped = await asX402Header(
      gateB,
      payload.payload as Awaited<ReturnType<typeof authorizationOnChain>>,
    );
    await expectRefused(await sendX402(gateB, rewrapped));
    await expectRefused(await sendX402(gateA, sent[0]!));
    expect(gateB.runs).toHaveLength(0);
    expect(gateA.runs).toHaveLength(1);
    expect(await balanceOf(account.address)).toBe(0n);
  });

  it("to the facilitator as the same request gets its answer again; under other requirements it is refused", async () => {
    const facilitator = new HTTPFacilitatorClient({ url: `${tf.url}/x402` });
    const account = await freshAccount(PRICE);
    const requirements: PaymentRequirements = {
      scheme: "exact",
      network: NETWORK,
      amount: PRICE.toString(),
      asset: devnet.contracts.usd,
      payTo,
      maxTimeoutSeconds: 300,
      // As a Tollgate gate sends it: naming itself, so that it may retry after a lost reply.
      extra: { name: "USD Coin", version: "2", tollgateGate: "0123456789abcdef0123456789abcdef" },
    };
    const payload = await standardClient(account).createPaymentPayload({
      x402Version: 2,
      resource: {
        url: "http://127.0.0.1/api/report",
        description: "one report",
        mimeType: "application/json",
      },
      accepts: [requirements],
    });
    const first = await facilitator.settle(payload, requirements);
    expect(first).toMatchObject({ success: true, payer: account.address });
    expect(await facilitator.settle(payload, requirements)).toEqual(first);

    const others: PaymentRequirements[] = [
      { ...requirements, extra: { ...requirements.extra, tollgateGate: "fedcba9876543210fedcba9876543210" } },
      { ...requirements, maxTimeoutSeconds: 299 },
      { ...requirements, extra: { name: "USD Coin", version: "2" } },
    ];
    for (const other of others) {
      expect(await facilitator.settle(payload, other)).toMatchObject({
        success: false,
        errorReason: NONCE_USED,
      });
      expect(await facilitator.verify(payload, other)).toMatchObject({
        isValid: false,
        invalidReason: NONCE_USED,
      });
    }
    expect(await balanceOf(account.address)).toBe(0n);
  });
});

describe("concurrent presentations of one transfer", () => {
  it("serve one identical PAYMENT-SIGNATURE once across instances sharing a guard and another gate", async () => {
    const secret = randomBytes(32);
    const one = await startGate({ memoSecret: secret, replayGuard: createPostgresReplayGuard(tf.store) });
    const two = await startGate({ memoSecret: secret, replayGuard: createPostgresReplayGuard(tf.store) });
    const other = await startGate();
    const account = await freshAccount(PRICE);
    const { x402 } = await offerOf(one);
    const header = encodePaymentSignatureHeader(await standardClient(account).createPaymentPayload(x402));
    const before = await balanceOf(payTo);

    const responses = await Promise.all(
      [one, two, other, one, two, other].map((gate) => sendX402(gate, header)),
    );
    // Copies at the instances sharing the guard meet the payment in flight (503 PaymentInFlight); the
    // other gate is refused by the facilitator, which holds the authorization for the first request.
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(1);
    expect(statuses.every((status) => status === 200 || status === 402 || status === 503)).toBe(true);
    expect([...one.runs, ...two.runs, ...other.runs]).toEqual([account.address]);
    expect(await balanceOf(payTo)).toBe(before + PRICE);
  });

  it("serve a transfer presented at once as its proof and as PAYMENT-SIGNATURE once, to the proof", async () => {
    const gate = await startGate();
    const account = await freshAccount(PRICE);
    const receipt = await payTollgate(gate, account);
    const stolen = await asX402Header(
      gate,
      await authorizationOnChain(receipt.proof.tx, memoNonce(receipt.proof.memo)),
    );
    const [proof, ...wrapped] = await Promise.all([
      fetch(gate.url, { headers: { "X-PAYMENT": receipt.header } }),
      sendX402(gate, stolen),
      sendX402(gate, stolen),
    ]);
    // A copy is refused (402), or meets the other copy in flight (503); neither is served.
    for (const response of wrapped) expect([402, 503]).toContain(response.status);
    expect(wrapped.some((response) => response.status === 402)).toBe(true);
    // The proof either won the race or met a wrapped copy in flight; it is good until served once.
    if (proof.status !== 200) {
      expect(proof.status).toBe(402);
      expect((await fetch(gate.url, { headers: { "X-PAYMENT": receipt.header } })).status).toBe(200);
    }
    expect(gate.runs).toEqual([account.address]);
  });
});

describe("a standard x402 resource server over this facilitator", () => {
  let server: Server;
  let origin: string;
  const runs: string[] = [];

  beforeAll(async () => {
    const resourceServer = new x402ResourceServer(
      new HTTPFacilitatorClient({ url: `${tf.url}/x402` }),
    ).register(NETWORK, new ExactEvmServerScheme());
    const priced = (extra: Record<string, unknown> = {}) => ({
      scheme: "exact" as const,
      network: NETWORK,
      payTo,
      price: {
        amount: PRICE.toString(),
        asset: devnet.contracts.usd,
        extra: { name: devnet.token.name, version: devnet.token.version, ...extra },
      },
      maxTimeoutSeconds: 120,
    });
    const app = express();
    app.use(
      paymentMiddleware(
        {
          // x402's default flow: verify, run the handler, settle.
          "GET /weather": { accepts: priced(), description: "today's weather" },
          // x402's upfront flow settles before the handler and never verifies.
          "GET /report": { accepts: priced({ paymentFlow: "upfront" }), description: "a report" },
        },
        resourceServer,
      ),
    );
    for (const path of ["/weather", "/report"]) {
      app.get(path, (_req, res) => {
        runs.push(path);
        res.json({ served: path });
      });
    }
    server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, "127.0.0.1", () => resolve(s));
    });
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  for (const path of ["/weather", "/report"]) {
    it(`does not serve ${path} again to a replayed PAYMENT-SIGNATURE`, async () => {
      const account = await freshAccount(PRICE);
      const sent: string[] = [];
      const recording: typeof fetch = async (input, init) => {
        const request = new Request(input, init);
        const header = request.headers.get("PAYMENT-SIGNATURE");
        if (header !== null) sent.push(header);
        return fetch(request);
      };
      const paid = await wrapFetchWithPayment(recording, standardClient(account))(`${origin}${path}`);
      expect(paid.status).toBe(200);
      const servedBefore = runs.length;

      const replays = [
        await fetch(`${origin}${path}`, { headers: { "PAYMENT-SIGNATURE": sent[0]! } }),
        ...(await Promise.all(
          [0, 1].map(() => fetch(`${origin}${path}`, { headers: { "PAYMENT-SIGNATURE": sent[0]! } })),
        )),
      ];
      for (const replay of replays) expect(replay.status).toBe(402);
      expect(runs.length).toBe(servedBefore);
      expect(await balanceOf(account.address)).toBe(0n);
    });
  }
});
