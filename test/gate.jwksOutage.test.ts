/**
 * A gate that starts (or restarts) while it cannot reach its facilitators holds no proof keys: a valid
 * proof must be answered 503 with Retry-After (the payer presents it again), never 402 "unknown key"
 * (the payer would pay again). On a real devnet and facilitator, reached through a TCP proxy the test
 * cuts and restores, with the facilitator client's failover over an instance that is down for good.
 * A proof signed by a key the facilitator does not publish, with a key set just fetched, stays 402.
 */
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { generateProofKey, signPaymentProof } from "../src/facilitator/proofKeys.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { decodeJsonHeader, encodeJsonHeader, HeaderName } from "../src/protocol/header.ts";
import { type PaymentProof, PaymentProofSchema } from "../src/protocol/paymentProof.ts";
import { PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { startTcpProxy, type TcpProxy } from "./support/tcpProxy.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let proxy: TcpProxy;
/** A loopback port nothing listens on: a facilitator instance that stays down. */
let deadUrl: string;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
  proxy = await startTcpProxy({ host: "127.0.0.1", port: Number(new URL(tf.url).port) });
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise((resolve) => probe.close(resolve));
  deadUrl = `http://127.0.0.1:${port}`;
});

afterAll(async () => {
  await proxy?.close();
  await tf?.stop();
  await devnet?.stop();
});

const memoSecret = randomBytes(32);

/** A freshly started gate (no keys cached) whose facilitator instances are `deadUrl` and the proxy. */
function startGate() {
  const gate = paymentGate({
    payTo: devnet.accounts[1]!.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: createFacilitatorClient({
      url: proxy.url,
      fallbackUrls: [deadUrl],
      fetch,
      timeoutMs: 5_000,
    }),
    memoSecret,
    routes: { "GET /api/item": { price: "0.01" } },
  });
  const app = new Hono();
  app.use("/api/*", async (c, next) => {
    const result = await gate(c.req.raw);
    if (result.kind === "respond") return result.response;
    await next();
  });
  app.get("/api/item", (c) => c.json({ item: true }));
  return app;
}

/** A proof paid for `/api/item` on a running gate, through the facilitator (via the proxy). */
async function paidProof(): Promise<string> {
  const app = startGate();
  const offer = PaymentRequiredSchema.parse(await (await app.request("/api/item")).json());
  const payer = createPayer({
    account: devnet.accounts[2]!.account,
    network: devnet.network,
    facilitator: createFacilitatorClient({ url: proxy.url, fetch }),
  });
  return (await payer.pay(offer.accepts[0]!)).header;
}

describe("a gate that cannot fetch its facilitators' proof keys", () => {
  it("answers a valid proof 503 with Retry-After while the keys cannot be fetched, and serves it once they can", async () => {
    const header = await paidProof();
    await proxy.cut();
    try {
      const restarted = startGate();
      for (let i = 0; i < 2; i++) {
        const response = await restarted.request("/api/item", { headers: { [HeaderName.Payment]: header } });
        expect(response.status).toBe(503);
        expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0);
        expect(await response.json()).toMatchObject({ error: { code: "ChainUnavailable" } });
      }
      await proxy.restore();
      // The next refresh is allowed 30 s after the failed one: a gate started now fetches at once.
      const later = startGate();
      expect((await later.request("/api/item", { headers: { [HeaderName.Payment]: header } })).status).toBe(
        200,
      );
    } finally {
      await proxy.restore().catch(() => undefined);
    }
  });

  it("refuses 402 a proof signed by a key the facilitator does not publish, its keys just fetched", async () => {
    const header = await paidProof();
    const genuine = decodeJsonHeader(header, PaymentProofSchema);
    const { kid: _kid, sig: _sig, ...unsigned } = genuine;
    const forged: PaymentProof = signPaymentProof(generateProofKey().key, unsigned);
    const response = await startGate().request("/api/item", {
      headers: { [HeaderName.Payment]: encodeJsonHeader(forged) },
    });
    expect(response.status).toBe(402);
    expect(JSON.stringify(await response.json())).toMatch(/unknown key/);
  });
});
