/**
 * Query-priced routes: with `routes` as a function pricing by query string, a proof bought for
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
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { signTransferAuthorization } from "../../src/chain/signers/signTransferAuthorization.ts";
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
    const large = await fetch(`${server.url}/api/image?size=large`);
    const requiredOf = (response: Response) =>
      JSON.parse(Buffer.from(response.headers.get("payment-required")!, "base64").toString("utf8"));
    const smallTerms = requiredOf(small).accepts[0];
    const largeTerms = requiredOf(large).accepts[0];
    expect([smallTerms.amount, largeTerms.amount]).toEqual(["10000", "5000000"]);
    const payer = devnet.accounts[2]!;
    // Signed for real by the payer, for the small price: the facilitator would settle it; only the
    // gate's own checks (the terms paid, the authorization's value) stand between it and the large size.
    const paySmall = async (accepted: unknown, resource: unknown) => {
      const authorization = {
        from: payer.address,
        to: devnet.accounts[1]!.address,
        value: 10_000n,
        validAfter: 0n,
        validBefore: BigInt(Math.floor(Date.now() / 1000) + 120),
        nonce: `0x${randomBytes(32).toString("hex")}` as const,
      };
      const signature = await signTransferAuthorization(payer.account, {
        domain: {
          name: devnet.token.name,
          version: devnet.token.version,
          chainId: devnet.chain.id,
          verifyingContract: devnet.contracts.usd,
        },
        authorization,
      });
      const payload = {
        x402Version: 2,
        resource,
        accepted,
        payload: {
          signature,
          authorization: {
            ...authorization,
            value: authorization.value.toString(),
            validAfter: authorization.validAfter.toString(),
            validBefore: authorization.validBefore.toString(),
          },
        },
      };
      return encodeJsonHeader(payload);
    };
    const balance = () =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: payer.address });
    const before = await balance();

    // The payload names the small terms: not terms of the large request.
    const forSmall = await paySmall(smallTerms, requiredOf(small).resource);
    const asLarge = await fetch(`${server.url}/api/image?size=large`, {
      headers: { "PAYMENT-SIGNATURE": forSmall },
    });
    expect(asLarge.status).toBe(402);
    expect(PaymentRequiredSchema.parse(await asLarge.json()).message).toMatch(
      /terms this route does not offer/,
    );

    // The payload claims the large terms, but its signed authorization moves the small value.
    const claimsLarge = await fetch(`${server.url}/api/image?size=large`, {
      headers: { "PAYMENT-SIGNATURE": await paySmall(largeTerms, requiredOf(large).resource) },
    });
    expect(claimsLarge.status).toBe(402);
    expect(PaymentRequiredSchema.parse(await claimsLarge.json()).message).toMatch(
      /authorization's value must be 5000000/,
    );
    expect(served).toEqual([]);
    expect(await balance()).toBe(before);

    // The same signed payment buys what it was signed for: it was refused for its terms, not its signature.
    const own = await fetch(`${server.url}/api/image?size=small`, {
      headers: { "PAYMENT-SIGNATURE": forSmall },
    });
    expect(own.status).toBe(200);
    expect(served).toEqual([{ size: "small", amount: 10_000n }]);
  });
});
