/**
 * Issue 10, finding 7: with `routes` as a function pricing by query string, a proof bought for
 * `?size=small` (0.01) was accepted for `?size=large` (5): the memo bound method and path only, and the
 * gate never compared the proof's amount with the price of the request it was shown on.
 *
 * Now the memo binds the query (`q`), and the gate refuses a proof whose amount is below the request's
 * current price. Replayed for real: a devnet, a facilitator, payments settled on chain, a Hono gate on a
 * socket.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Devnet } from "../../src/chain/startDevnet.ts";
import { startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../../src/client/createPayer.ts";
import { type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";
import { encodeJsonHeader } from "../../src/protocol/header.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { startTestFacilitator, type TestFacilitator } from "../support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let server: RunningServer;
let payer: Payer;
/** The price of `?size=small` now; a test raises it to show an old, cheaper proof is refused. */
let smallPrice = "0.01";
const served: { size: string; amount: bigint | undefined }[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
  const gate = paymentGate({
    payTo: devnet.accounts[1]!.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    memoSecret: randomBytes(32),
    // Priced by the query: a large image costs 500 times a small one.
    routes: ({ path, url }) =>
      path === "/api/image"
        ? { price: url.searchParams.get("size") === "large" ? "5" : smallPrice }
        : undefined,
  });
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.get("/api/image", (c) => {
    served.push({ size: c.req.query("size") ?? "", amount: c.get("payment")?.amount });
    return c.json({ size: c.req.query("size") });
  });
  server = await serveApp(app);
  payer = createPayer({
    account: devnet.accounts[2]!.account,
    network: devnet.network,
    facilitator: tf.url,
    fetch,
  });
});

afterAll(async () => {
  await server?.close();
  await tf?.stop();
  await devnet?.stop();
});

async function offerFor(query: string): Promise<PaymentRequired> {
  const response = await fetch(`${server.url}/api/image?${query}`);
  expect(response.status).toBe(402);
  return PaymentRequiredSchema.parse(await response.json());
}

describe("a proof bought for one query of a route priced by query", () => {
  it("does not buy another query of the same path: a 0.01 proof for size=small is refused for size=large", async () => {
    served.length = 0;
    const small = await offerFor("size=small");
    expect(small.accepts[0]?.amount).toBe("10000");
    expect((await offerFor("size=large")).accepts[0]?.amount).toBe("5000000");
    const receipt = await payer.pay(small.accepts[0]!, { maxAmount: "0.01" });

    const large = await fetch(`${server.url}/api/image?size=large`, {
      headers: { "X-PAYMENT": receipt.header },
    });
    expect(large.status).toBe(402);
    const refusal = PaymentRequiredSchema.parse(await large.json());
    expect(refusal.error).toBe("InvalidPaymentProof");
    expect(refusal.message).toMatch(/another query/);
    expect(refusal.accepts[0]?.amount).toBe("5000000");
    expect(served).toEqual([]);

    // The refusal did not use the proof up: it still buys what it was bought for, once.
    const own = await fetch(`${server.url}/api/image?size=small`, {
      headers: { "X-PAYMENT": receipt.header },
    });
    expect(own.status).toBe(200);
    expect(served).toEqual([{ size: "small", amount: 10_000n }]);
  });

  it("does not buy the request once its price rose above what the proof paid", async () => {
    served.length = 0;
    smallPrice = "0.01";
    const offer = await offerFor("size=small");
    const receipt = await payer.pay(offer.accepts[0]!, { maxAmount: "0.01" });
    smallPrice = "0.05";
    try {
      const response = await fetch(`${server.url}/api/image?size=small`, {
        headers: { "X-PAYMENT": receipt.header },
      });
      expect(response.status).toBe(402);
      const refusal = PaymentRequiredSchema.parse(await response.json());
      expect(refusal.message).toMatch(/pays 10000, less than this request's price 50000/);
      expect(served).toEqual([]);
    } finally {
      smallPrice = "0.01";
    }
  });

  it("does not take an x402 payment for the small size as payment for the large one", async () => {
    served.length = 0;
    const small = await fetch(`${server.url}/api/image?size=small`);
    const required = JSON.parse(
      Buffer.from(small.headers.get("payment-required")!, "base64").toString("utf8"),
    );
    const payload = {
      x402Version: 2,
      resource: required.resource,
      accepted: required.accepts[0],
      payload: {
        signature: `0x${"11".repeat(65)}`,
        authorization: {
          from: devnet.accounts[2]!.address,
          to: devnet.accounts[1]!.address,
          value: required.accepts[0].amount,
          validAfter: "0",
          validBefore: String(Math.floor(Date.now() / 1000) + 120),
          nonce: `0x${randomBytes(32).toString("hex")}`,
        },
      },
    };
    const large = await fetch(`${server.url}/api/image?size=large`, {
      headers: { "PAYMENT-SIGNATURE": encodeJsonHeader(payload) },
    });
    expect(large.status).toBe(402);
    expect(PaymentRequiredSchema.parse(await large.json()).message).toMatch(/x402 payment refused/);
    expect(served).toEqual([]);
  });
});
