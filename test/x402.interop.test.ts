/**
 * Standard x402 v2 interop of the gate and the payer (docs/x402.md), proven with the published x402
 * packages against a real facilitator on a real devnet:
 * (a) `@x402/fetch` + `@x402/evm`'s exact client pay a Tollgate gate (Hono) with `PAYMENT-SIGNATURE`;
 *     the gate settles through `<facilitator>/x402/settle` before its handler and serves each payment
 *     once, replays and concurrent replays included, across instances sharing a replay guard, and
 *     after a facilitator outage;
 * (b) Tollgate's `fetchWithPayment` pays a standard `@x402/express` server whose facilitator client
 *     points at `<facilitator>/x402`.
 */
import { randomBytes } from "node:crypto";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { x402Client } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentSignatureHeader,
  HTTPFacilitatorClient,
} from "@x402/core/http";
import type { PaymentPayload } from "@x402/core/types";
import { ExactEvmScheme as ExactEvmClientScheme } from "@x402/evm/exact/client";
import { ExactEvmScheme as ExactEvmServerScheme } from "@x402/evm/exact/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { wrapFetchWithPayment } from "@x402/fetch";
import express from "express";
import { Hono } from "hono";
import type { Address, Hash, PrivateKeyAccount } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { type GatePayment, paymentGate } from "../src/gate/paymentGate.ts";
import { PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import { createPostgresReplayGuard } from "../src/store/createPostgresReplayGuard.ts";
import type { ReplayGuard } from "../src/store/replayGuard.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { startTcpProxy, type TcpProxy } from "./support/tcpProxy.ts";

const NETWORK = "eip155:31337" as const;
const PRICE = 10_000n;
/** One secret for every gate of this suite: instances of one API. */
const MEMO_SECRET = randomBytes(32);

let devnet: Devnet;
let tf: TestFacilitator;
let payTo: Address;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  payTo = devnet.accounts[2]!.address;
});

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

function balanceOf(owner: Address): Promise<bigint> {
  return getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
}

/** A fresh payer key holding `usd` test USD and no ETH: x402 payers never pay gas. */
async function freshPayer(usd: bigint): Promise<PrivateKeyAccount> {
  const account = privateKeyToAccount(generatePrivateKey());
  if (usd > 0n) await devnet.fund(account.address, { usd });
  return account;
}

/** The standard x402 client for `account`, allowed to pay the devnet token (x402 v2 clients refuse unknown assets). */
function standardClient(account: PrivateKeyAccount): x402Client {
  return new x402Client()
    .register(NETWORK, new ExactEvmClientScheme(account))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: devnet.contracts.usd }] });
}

async function expectOnChain(transaction: string) {
  const receipt = await devnet.publicClient.getTransactionReceipt({ hash: transaction as Hash });
  expect(receipt.status).toBe("success");
}

describe("a standard x402 client paying a Tollgate gate", () => {
  type GateServer = { server: RunningServer; served: GatePayment[] };
  const servers: RunningServer[] = [];
  let proxy: TcpProxy;
  let gate: GateServer;

  /** A Hono app behind `paymentGate`, served on a port; the token's EIP-712 domain is looked up from the facilitator. */
  async function startGate(
    options: { facilitator?: string; replayGuard?: ReplayGuard; fetch?: typeof fetch } = {},
  ): Promise<GateServer> {
    const served: GatePayment[] = [];
    const app = new Hono<PaymentGateEnv>();
    app.use(
      "/api/*",
      honoPaymentGate(
        paymentGate({
          payTo,
          network: NETWORK,
          token: devnet.contracts.usd,
          facilitator: options.facilitator ?? tf.url,
          memoSecret: MEMO_SECRET,
          ...(options.replayGuard === undefined ? {} : { replayGuard: options.replayGuard }),
          ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
          routes: { "GET /api/weather": { amount: PRICE, description: "today's weather" } },
        }),
      ),
    );
    app.get("/api/weather", (c) => {
      const payment = c.get("payment");
      if (payment !== undefined) served.push(payment);
      return c.json({ forecast: "sunny" });
    });
    const server = await serveApp(app);
    servers.push(server);
    return { server, served };
  }

  /** A signed payload for the gate's current 402, as `@x402/fetch` would send it. */
  async function signedHeader(account: PrivateKeyAccount, origin: string): Promise<string> {
    const unpaid = await fetch(`${origin}/api/weather`);
    expect(unpaid.status).toBe(402);
    const required = decodePaymentRequiredHeader(unpaid.headers.get("PAYMENT-REQUIRED") ?? "");
    const payload: PaymentPayload = await standardClient(account).createPaymentPayload(required);
    return encodePaymentSignatureHeader(payload);
  }

  beforeAll(async () => {
    gate = await startGate();
    const facilitatorPort = Number(new URL(tf.url).port);
    proxy = await startTcpProxy({ host: "127.0.0.1", port: facilitatorPort });
  });

  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    await proxy?.close();
  });

  it("offers the exact scheme in PAYMENT-REQUIRED with the token's EIP-712 domain", async () => {
    const unpaid = await fetch(`${gate.server.url}/api/weather`);
    expect(unpaid.status).toBe(402);
    const required = decodePaymentRequiredHeader(unpaid.headers.get("PAYMENT-REQUIRED") ?? "");
    expect(required.accepts).toEqual([
      {
        scheme: "exact",
        network: NETWORK,
        amount: PRICE.toString(),
        asset: devnet.contracts.usd,
        payTo,
        maxTimeoutSeconds: 300,
        extra: { name: devnet.token.name, version: devnet.token.version },
      },
    ]);
  });

  it("is paid by @x402/fetch: 200 with PAYMENT-RESPONSE, settled on chain, balances moved once", async () => {
    const payer = await freshPayer(50_000n);
    const before = await balanceOf(payTo);
    const sent: string[] = [];
    const recordingFetch: typeof fetch = async (input, init) => {
      const request = new Request(input, init);
      const header = request.headers.get("PAYMENT-SIGNATURE");
      if (header !== null) sent.push(header);
      return fetch(request);
    };
    const paidFetch = wrapFetchWithPayment(recordingFetch, standardClient(payer));

    const paid = await paidFetch(`${gate.server.url}/api/weather`);
    expect(paid.status).toBe(200);
    expect(await paid.json()).toEqual({ forecast: "sunny" });
    const receipt = decodePaymentResponseHeader(paid.headers.get("PAYMENT-RESPONSE") ?? "");
    expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: payer.address });
    await expectOnChain(receipt.transaction);
    expect(await balanceOf(payer.address)).toBe(50_000n - PRICE);
    expect(await balanceOf(payTo)).toBe(before + PRICE);
    expect(gate.served.at(-1)).toMatchObject({
      payer: payer.address,
      amount: PRICE,
      transaction: receipt.transaction,
    });

    // The same payload again, alone and twice at once: refused every time, nothing moves.
    expect(sent).toHaveLength(1);
    const servedBefore = gate.served.length;
    const replay = () =>
      fetch(`${gate.server.url}/api/weather`, { headers: { "PAYMENT-SIGNATURE": sent[0]! } });
    const replays = [await replay(), ...(await Promise.all([replay(), replay()]))];
    for (const response of replays) {
      expect(response.status).toBe(402);
      expect(decodePaymentRequiredHeader(response.headers.get("PAYMENT-REQUIRED") ?? "").error).toBe(
        "invalid_exact_evm_nonce_already_used",
      );
    }
    expect(gate.served).toHaveLength(servedBefore);
    expect(await balanceOf(payer.address)).toBe(50_000n - PRICE);
    expect(await balanceOf(payTo)).toBe(before + PRICE);
  });

  it("serves a payload sent several times at once exactly once, moving the money once", async () => {
    const payer = await freshPayer(50_000n);
    const before = await balanceOf(payTo);
    const servedBefore = gate.served.length;
    const header = await signedHeader(payer, gate.server.url);
    const responses = await Promise.all(
      Array.from({ length: 4 }, () =>
        fetch(`${gate.server.url}/api/weather`, { headers: { "PAYMENT-SIGNATURE": header } }),
      ),
    );
    // The copies meet the payment in flight (503 PaymentInFlight), or used once it settled (402).
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(1);
    expect(statuses.every((status) => [200, 402, 503].includes(status))).toBe(true);
    expect(gate.served.length - servedBefore).toBe(1);
    expect(await balanceOf(payer.address)).toBe(50_000n - PRICE);
    expect(await balanceOf(payTo)).toBe(before + PRICE);
  });

  it("serves a payload once across two gate instances sharing a replay guard", async () => {
    const one = await startGate({ replayGuard: createPostgresReplayGuard(tf.store) });
    const two = await startGate({ replayGuard: createPostgresReplayGuard(tf.store) });
    const payer = await freshPayer(50_000n);
    const before = await balanceOf(payTo);
    const header = await signedHeader(payer, one.server.url);
    const responses = await Promise.all(
      [one, two, one, two].map((g) =>
        fetch(`${g.server.url}/api/weather`, { headers: { "PAYMENT-SIGNATURE": header } }),
      ),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(1);
    expect(statuses.every((status) => [200, 402, 503].includes(status))).toBe(true);
    expect(one.served.length + two.served.length).toBe(1);
    expect(await balanceOf(payTo)).toBe(before + PRICE);
  });

  it("answers 503 while the facilitator is unreachable and serves the same header once it is back", async () => {
    const behindProxy = await startGate({ facilitator: proxy.url });
    // A first 402 while the facilitator is reachable: the gate learns the token's EIP-712 domain.
    const payer = await freshPayer(50_000n);
    const header = await signedHeader(payer, behindProxy.server.url);
    const before = await balanceOf(payTo);

    await proxy.cut();
    const down = await fetch(`${behindProxy.server.url}/api/weather`, {
      headers: { "PAYMENT-SIGNATURE": header },
    });
    expect(down.status).toBe(503);
    expect(down.headers.get("Retry-After")).not.toBeNull();
    expect(behindProxy.served).toHaveLength(0);
    expect(await balanceOf(payer.address)).toBe(50_000n);

    await proxy.restore();
    const retried = await fetch(`${behindProxy.server.url}/api/weather`, {
      headers: { "PAYMENT-SIGNATURE": header },
    });
    expect(retried.status).toBe(200);
    await expectOnChain(
      decodePaymentResponseHeader(retried.headers.get("PAYMENT-RESPONSE") ?? "").transaction,
    );
    expect(behindProxy.served).toHaveLength(1);
    expect(await balanceOf(payer.address)).toBe(50_000n - PRICE);
    expect(await balanceOf(payTo)).toBe(before + PRICE);
  });

  it("serves a payment the facilitator settled although the gate never heard back, once", async () => {
    // The gate's first settle reaches the facilitator and settles, but its reply is lost on the way back.
    let settled: Response | undefined;
    const losingFetch: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (settled === undefined && new Request(input, init).url.endsWith("/x402/settle")) {
        settled = response;
        throw new TypeError("fetch failed: connection reset");
      }
      return response;
    };
    const lossy = await startGate({ fetch: losingFetch });
    const payer = await freshPayer(50_000n);
    const header = await signedHeader(payer, lossy.server.url);
    const before = await balanceOf(payTo);

    const lost = await fetch(`${lossy.server.url}/api/weather`, { headers: { "PAYMENT-SIGNATURE": header } });
    expect(lost.status).toBeGreaterThanOrEqual(500);
    const direct = (await settled?.json()) as { success: boolean; transaction: string };
    expect(direct.success).toBe(true);
    // The handler ran before the settle (verify, run, settle); its answer was withheld with the 5xx.
    expect(lossy.served).toHaveLength(1);
    expect(await lost.text()).not.toMatch(/sunny/);
    expect(await balanceOf(payTo)).toBe(before + PRICE);

    // The client retries the same header: the facilitator answers the gate's identical request again.
    const served = await fetch(`${lossy.server.url}/api/weather`, {
      headers: { "PAYMENT-SIGNATURE": header },
    });
    expect(served.status).toBe(200);
    expect(decodePaymentResponseHeader(served.headers.get("PAYMENT-RESPONSE") ?? "").transaction).toBe(
      direct.transaction,
    );
    const again = await fetch(`${lossy.server.url}/api/weather`, {
      headers: { "PAYMENT-SIGNATURE": header },
    });
    expect(again.status).toBe(402);
    expect(lossy.served).toHaveLength(2);
    expect(await balanceOf(payer.address)).toBe(50_000n - PRICE);
    expect(await balanceOf(payTo)).toBe(before + PRICE);
  });

  it("refuses a payer without the funds with a fresh 402 naming the reason, moving nothing", async () => {
    const payer = await freshPayer(PRICE - 1n);
    const before = await balanceOf(payTo);
    const servedBefore = gate.served.length;
    const refused = await wrapFetchWithPayment(
      fetch,
      standardClient(payer),
    )(`${gate.server.url}/api/weather`);
    expect(refused.status).toBe(402);
    expect(decodePaymentRequiredHeader(refused.headers.get("PAYMENT-REQUIRED") ?? "").error).toBe(
      "invalid_exact_evm_insufficient_balance",
    );
    const body = PaymentRequiredSchema.parse(await refused.json());
    expect(body.error).toBe("InvalidPaymentProof");
    expect(gate.served).toHaveLength(servedBefore);
    expect(await balanceOf(payer.address)).toBe(PRICE - 1n);
    expect(await balanceOf(payTo)).toBe(before);
  });
});

describe("Tollgate's fetchWithPayment paying a standard @x402/express server", () => {
  let server: Server;
  let origin: string;

  beforeAll(async () => {
    const facilitator = new HTTPFacilitatorClient({ url: `${tf.url}/x402` });
    const resourceServer = new x402ResourceServer(facilitator).register(NETWORK, new ExactEvmServerScheme());
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
          // x402's default EIP-3009 flow: verify, run the handler, then settle.
          "GET /weather": { accepts: priced(), description: "today's weather", mimeType: "application/json" },
          // Settle before the handler.
          "GET /report": { accepts: priced({ paymentFlow: "upfront" }), description: "a report" },
        },
        resourceServer,
      ),
    );
    app.get("/weather", (_req, res) => {
      res.json({ forecast: "sunny" });
    });
    app.get("/report", (_req, res) => {
      res.json({ report: "all well" });
    });
    server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, "127.0.0.1", () => resolve(s));
    });
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  for (const path of ["/weather", "/report"]) {
    it(`pays ${path} with PAYMENT-SIGNATURE by default: 200, settled on chain, balances exact`, async () => {
      const account = await freshPayer(50_000n);
      const payer = createPayer({ account, network: NETWORK, facilitator: tf.url });
      const before = await balanceOf(payTo);
      const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "0.05" });

      const paid = await paidFetch(`${origin}${path}`);
      expect(paid.status).toBe(200);
      const receipt = decodePaymentResponseHeader(paid.headers.get("PAYMENT-RESPONSE") ?? "");
      expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: account.address });
      await expectOnChain(receipt.transaction);
      expect(await balanceOf(account.address)).toBe(50_000n - PRICE);
      expect(await balanceOf(payTo)).toBe(before + PRICE);
    });
  }

  it("does not pay above its ceiling, and nothing moves", async () => {
    const account = await freshPayer(50_000n);
    const payer = createPayer({ account, network: NETWORK, facilitator: tf.url });
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: PRICE - 1n });
    await expect(paidFetch(`${origin}/weather`)).rejects.toMatchObject({ code: "PriceCeilingExceeded" });
    expect(await balanceOf(account.address)).toBe(50_000n);
  });
});
