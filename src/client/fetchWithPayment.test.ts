import { Hono } from "hono";
import { beforeEach, describe, expect, it } from "vitest";
import { jwksOf, type ProofKey, proofKeyFromSeed, signPaymentProof } from "../facilitator/proofKeys.ts";
import { honoPaymentGate } from "../gate/honoPaymentGate.ts";
import { paymentGate } from "../gate/paymentGate.ts";
import type { FacilitatorClient, FetchFn } from "../http/facilitatorClient.ts";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { encodeJsonHeader } from "../protocol/header.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import { type FetchPayer, fetchWithPayment } from "./fetchWithPayment.ts";
import { parseUsdcCeiling } from "./parseUsdcCeiling.ts";
import type { PaymentReceipt } from "./payerTypes.ts";

const PAYER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const FACILITATOR = "http://facilitator.test";
const trusted = proofKeyFromSeed(new Uint8Array(32).fill(4));
const stranger = proofKeyFromSeed(new Uint8Array(32).fill(8));

/**
 * A real gate in front of a handler that echoes the request body, so that what the client sends can
 * be checked on the server side.
 */
function setup() {
  const clock = createFixedClock(1_763_800_000_000);
  const gate = paymentGate({
    payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    network: "eip155:31337",
    token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
    facilitator: FACILITATOR,
    fetch: async () => {
      throw new Error("no network in unit tests");
    },
    memoSecret: "fetch-with-payment-test-secret-32-bytes-long",
    clock,
    proofKeys: jwksOf([trusted]),
    routes: {
      "POST /echo": { price: "0.10" },
      "GET /choice": {
        pricing: [
          { type: "one-time", price: "0.30" },
          { type: "one-time", price: "0.20" },
        ],
      },
      "GET /pricey": { price: "5" },
      "GET /flaky": { price: "0.10" },
      "GET /stubborn": { price: "0.10" },
    },
  });
  const app = new Hono();
  // A server that runs the gate itself and reports a served request while it answers 500: a proof it
  // took stays used up.
  app.get("/stubborn", async (c) => {
    const result = await gate(c.req.raw);
    if (result.kind === "respond") return result.response;
    await result.complete(200);
    return c.json({ error: { code: "Internal", message: "down" } }, 500);
  });
  app.use("*", honoPaymentGate(gate));
  app.post("/echo", async (c) => c.text(`echo:${await c.req.text()}`));
  app.get("/choice", (c) => c.text("chosen"));
  app.get("/pricey", (c) => c.text("pricey"));
  app.get("/free", (c) => c.text("free"));
  /** What /flaky answers on its next runs, in order (then 200): a 5xx status, with `Retry-After` if given. */
  const flaky: { status: 500 | 502 | 503; retryAfter?: string }[] = [];
  let flakyRuns = 0;
  app.get("/flaky", (c) => {
    flakyRuns++;
    const next = flaky.shift();
    if (next === undefined) return c.text("served");
    if (next.retryAfter !== undefined) c.header("Retry-After", next.retryAfter);
    return c.json({ error: { code: "Internal", message: "the upstream is down" } }, next.status);
  });
  app.get("/x402-only", (c) => {
    const header = encodeJsonHeader({
      x402Version: 2,
      resource: { url: "http://api.test/x402-only" },
      accepts: [
        {
          scheme: "exact",
          network: "eip155:31337",
          amount: "1",
          asset: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
          payTo: PAYER,
          maxTimeoutSeconds: 60,
          extra: {},
        },
      ],
    });
    if (c.req.header("PAYMENT-SIGNATURE") === "signed") return c.text("x402 paid");
    return c.html("<h1>Payment required</h1>", 402, { "PAYMENT-REQUIRED": header });
  });

  const sent: Request[] = [];
  const fetch: FetchFn = async (input, init) => {
    const request = new Request(input, init);
    sent.push(request.clone());
    return app.fetch(request);
  };

  const paid: PaymentOption[] = [];
  let signer: ProofKey = trusted;
  /** A payer that signs proofs the way the facilitator would, without settling anything. */
  const payer: FetchPayer = {
    address: PAYER,
    network: "eip155:31337",
    facilitator: { url: FACILITATOR } as FacilitatorClient,
    async pay(option, { maxAmount }): Promise<PaymentReceipt> {
      if (BigInt(option.amount) > parseUsdcCeiling(maxAmount)) throw new Error("over the ceiling");
      paid.push(option);
      const now = unixSeconds(clock);
      const proof = signPaymentProof(signer, {
        v: "1",
        scheme: "exact",
        network: option.network,
        token: option.token,
        amount: option.amount,
        payer: PAYER,
        payTo: option.payTo,
        memo: option.memo,
        tx: `0x${"99".repeat(32)}`,
        iat: now,
        exp: now + 300,
      });
      return { option, proof, header: encodeJsonHeader(proof), settled: undefined };
    },
  };
  return {
    clock,
    fetch,
    sent,
    paid,
    payer,
    flaky,
    flakyRuns: () => flakyRuns,
    useStrangerKey() {
      signer = stranger;
    },
  };
}

async function refusal(promise: Promise<unknown>): Promise<TollgateError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof TollgateError) return error;
    throw error;
  }
  throw new Error("expected a refusal");
}

describe("fetchWithPayment", () => {
  let kit: ReturnType<typeof setup>;
  beforeEach(() => {
    kit = setup();
  });

  it("returns a response that needs no payment as is, after one request", async () => {
    const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1" });
    const response = await paidFetch("http://api.test/free");
    expect(await response.text()).toBe("free");
    expect(kit.sent).toHaveLength(1);
    expect(kit.paid).toHaveLength(0);
  });

  it("pays a 402 and resends the same body with X-PAYMENT", async () => {
    const receipts: PaymentReceipt[] = [];
    const paidFetch = fetchWithPayment(kit.fetch, kit.payer, {
      maxPrice: 100_000n,
      onPayment: (receipt) => receipts.push(receipt),
    });
    const response = await paidFetch("http://api.test/echo", { method: "POST", body: "hello tollgate" });
    expect(response.status).toBe(200);
    expect(await response.text()).toBe("echo:hello tollgate");
    expect(response.headers.get("x-payment-response")).not.toBeNull();
    expect(kit.sent).toHaveLength(2);
    expect(kit.sent[0]?.headers.get("x-payment")).toBeNull();
    expect(kit.sent[1]?.headers.get("x-payment")).toBe(receipts[0]?.header);
    expect(await kit.sent[1]?.text()).toBe("hello tollgate");
  });

  it("resends a streamed body too, since it is buffered once", async () => {
    const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "0.10" });
    const stream = new Blob(["streamed bytes"]).stream();
    const response = await paidFetch(
      new Request("http://api.test/echo", { method: "POST", body: stream, duplex: "half" } as RequestInit),
    );
    expect(await response.text()).toBe("echo:streamed bytes");
  });

  it("pays the cheapest option within the ceiling by default", async () => {
    const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "0.25" });
    expect(await (await paidFetch("http://api.test/choice")).text()).toBe("chosen");
    expect(kit.paid.map((o) => o.amount)).toEqual(["200000"]);
  });

  it("refuses with PriceCeilingExceeded, paying nothing, when every option costs more", async () => {
    const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1.00" });
    const error = await refusal(paidFetch("http://api.test/pricey"));
    expect(error.code).toBe("PriceCeilingExceeded");
    expect(error.details).toEqual({ cheapest: "5000000", maxPrice: "1000000" });
    expect(kit.paid).toHaveLength(0);
  });

  it("lets `choose` pick an option or decline, returning the 402", async () => {
    const dearest = fetchWithPayment(kit.fetch, kit.payer, {
      maxPrice: "1",
      choose: (options) => options.find((o) => o.amount === "300000"),
    });
    expect((await dearest("http://api.test/choice")).status).toBe(200);
    expect(kit.paid.map((o) => o.amount)).toEqual(["300000"]);

    const decline = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1", choose: () => undefined });
    const response = await decline("http://api.test/choice");
    expect(response.status).toBe(402);
    expect(((await response.json()) as { error: string }).error).toBe("PaymentRequired");
    expect(kit.paid).toHaveLength(1);
  });

  it("retries a refused proof with the fresh 402 up to maxProofRetries, then throws InvalidPaymentProof", async () => {
    kit.useStrangerKey();
    const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1", maxProofRetries: 2 });
    const error = await refusal(paidFetch("http://api.test/echo", { method: "POST", body: "x" }));
    expect(error.code).toBe("InvalidPaymentProof");
    expect(error.message).toMatch(/unknown key/);
    expect(kit.paid).toHaveLength(3);
    expect(new Set(kit.paid.map((o) => o.memo)).size).toBe(3);
    expect(kit.sent).toHaveLength(4);
  });

  describe("a paid request answered 5xx", () => {
    /** Records each wait instead of sleeping, and moves the gate's clock by it. */
    const waits: number[] = [];
    const sleep = async (ms: number) => {
      waits.push(ms);
      kit.clock.advance(ms);
    };
    beforeEach(() => {
      waits.length = 0;
    });

    it("re-sends the same proof and ends in a 200 with one payment", async () => {
      kit.flaky.push({ status: 500 });
      const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1", sleep, clock: kit.clock });
      const response = await paidFetch("http://api.test/flaky");
      expect(response.status).toBe(200);
      expect(await response.text()).toBe("served");
      expect(kit.paid).toHaveLength(1);
      expect(kit.flakyRuns()).toBe(2);
      const proofs = kit.sent.map((r) => r.headers.get("X-PAYMENT")).filter((h) => h !== null);
      expect(proofs).toHaveLength(2);
      expect(proofs[1]).toBe(proofs[0]);
      expect(waits).toEqual([500]);
    });

    it("honours Retry-After within the cap", async () => {
      kit.flaky.push({ status: 503, retryAfter: "3" });
      const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1", sleep, clock: kit.clock });
      expect((await paidFetch("http://api.test/flaky")).status).toBe(200);
      expect(waits).toEqual([3_000]);
      expect(kit.paid).toHaveLength(1);
    });

    it("throws PaidRequestFailed with the redeemable proof after the retries, never paying again", async () => {
      kit.flaky.push({ status: 500 }, { status: 502 }, { status: 503 }, { status: 500 });
      const paidFetch = fetchWithPayment(kit.fetch, kit.payer, {
        maxPrice: "1",
        maxServerErrorRetries: 2,
        sleep,
        clock: kit.clock,
      });
      const error = await refusal(paidFetch("http://api.test/flaky"));
      expect(error.code).toBe("PaidRequestFailed");
      expect(kit.paid).toHaveLength(1);
      expect(kit.flakyRuns()).toBe(3);
      const proof = kit.sent.at(-1)!.headers.get("X-PAYMENT");
      expect(error.details).toMatchObject({
        url: "http://api.test/flaky",
        status: 503,
        sends: 3,
        paid: true,
        amount: "100000",
        payer: PAYER,
        transaction: `0x${"99".repeat(32)}`,
        proof,
        redeemableUntil: Math.floor(1_763_800_000_000 / 1000) + 300,
      });
      expect(error.message).toMatch(/stays redeemable until/);
      // The proof is still good: the gate handed it back, and the seller has recovered.
      kit.flaky.length = 0;
      const later = await kit.fetch("http://api.test/flaky", { headers: { "X-PAYMENT": proof! } });
      expect(later.status).toBe(200);
    });

    it("never pays a fresh 402 after a 5xx: a refused re-send ends the call with the proof", async () => {
      const paidFetch = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1", sleep, clock: kit.clock });
      const error = await refusal(paidFetch("http://api.test/stubborn"));
      expect(error.code).toBe("PaidRequestFailed");
      expect(error.details).toMatchObject({ status: 500, sends: 2, paid: true });
      expect(String(error.details?.refused)).toMatch(/already used/);
      expect(error.details).not.toHaveProperty("redeemableUntil");
      expect(kit.paid).toHaveLength(1);
    });

    it("stops at once when Retry-After asks for longer than the cap", async () => {
      kit.flaky.push({ status: 503, retryAfter: "60" });
      const paidFetch = fetchWithPayment(kit.fetch, kit.payer, {
        maxPrice: "1",
        maxServerErrorRetryDelayMs: 10_000,
        sleep,
        clock: kit.clock,
      });
      const error = await refusal(paidFetch("http://api.test/flaky"));
      expect(error.code).toBe("PaidRequestFailed");
      expect(error.details).toMatchObject({ status: 503, sends: 1, paid: true });
      expect(waits).toEqual([]);
    });

    it("does not wait past the proof's expiry", async () => {
      kit.flaky.push({ status: 500 });
      const paidFetch = fetchWithPayment(kit.fetch, kit.payer, {
        maxPrice: "1",
        serverErrorRetryDelayMs: 1_000,
        sleep,
        clock: { now: () => kit.clock.now() + 299_500 },
      });
      const error = await refusal(paidFetch("http://api.test/flaky"));
      expect(error.details).toMatchObject({ sends: 1 });
      expect(waits).toEqual([]);
    });

    it("refuses bad retry options at construction", () => {
      for (const bad of [
        { maxServerErrorRetries: -1 },
        { maxServerErrorRetries: 11 },
        { sleep, serverErrorRetryDelayMs: 0.5 },
      ]) {
        expect(() => fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1", ...bad })).toThrow(
          TollgateError,
        );
      }
    });
  });

  it("refuses a server that takes only x402 payments unless a payX402 seam is given", async () => {
    const plain = fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1" });
    expect((await refusal(plain("http://api.test/x402-only"))).message).toMatch(/x402/);

    const seen: unknown[] = [];
    const withSeam = fetchWithPayment(kit.fetch, kit.payer, {
      maxPrice: "1",
      payX402: async (required) => {
        seen.push(required.accepts[0]?.amount);
        return { name: "PAYMENT-SIGNATURE", value: "signed" };
      },
    });
    expect(await (await withSeam("http://api.test/x402-only")).text()).toBe("x402 paid");
    expect(seen).toEqual(["1"]);
  });

  it("refuses with UnsupportedNetwork when no option is on the payer's network", async () => {
    const elsewhere: FetchPayer = { ...kit.payer, network: "eip155:8453" };
    const paidFetch = fetchWithPayment(kit.fetch, elsewhere, { maxPrice: "1" });
    expect((await refusal(paidFetch("http://api.test/choice"))).code).toBe("UnsupportedNetwork");
  });

  it("tells a payer whose facilitator settles on another network which facilitator the seller uses", async () => {
    const mine = "http://127.0.0.1:4021";
    const elsewhere: FetchPayer = {
      ...kit.payer,
      network: "eip155:84532",
      facilitator: { url: mine } as FacilitatorClient,
    };
    const error = await refusal(
      fetchWithPayment(kit.fetch, elsewhere, { maxPrice: "1" })("http://api.test/choice"),
    );
    expect(error.code).toBe("UnsupportedNetwork");
    expect(error.message).toBe(
      `the seller asks for payment on eip155:31337 through the facilitator at ${FACILITATOR}; your facilitator at ${mine} settles on eip155:84532: point the payer at the seller's facilitator (${FACILITATOR})`,
    );
    expect(error.details).toMatchObject({
      reason: "other_network",
      networks: ["eip155:31337"],
      facilitators: [FACILITATOR],
      payerNetwork: "eip155:84532",
      payerFacilitator: mine,
    });
    expect(kit.paid).toHaveLength(0);
  });

  it("tells a payer on the seller's network but another facilitator to use the seller's", async () => {
    const mine = "http://127.0.0.1:4021";
    const other: FetchPayer = { ...kit.payer, facilitator: { url: mine } as FacilitatorClient };
    const error = await refusal(
      fetchWithPayment(kit.fetch, other, { maxPrice: "1" })("http://api.test/choice"),
    );
    expect(error.code).toBe("UnsupportedNetwork");
    expect(error.message).toBe(
      `the seller asks for payment on eip155:31337 through the facilitator at ${FACILITATOR}; your facilitator at ${mine} is another facilitator, whose proofs the seller does not accept: point the payer at the seller's facilitator (${FACILITATOR})`,
    );
    expect(error.details?.reason).toBe("other_facilitator");
    expect(kit.paid).toHaveLength(0);
  });

  it("refuses a missing or malformed ceiling at construction", () => {
    expect(() => fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "0.1234567" })).toThrow(/decimals/);
    expect(() => fetchWithPayment(kit.fetch, kit.payer, { maxPrice: 0.5 as never })).toThrow(/ceiling/);
    expect(() => fetchWithPayment(kit.fetch, kit.payer, { maxPrice: "1", maxProofRetries: -1 })).toThrow(
      /maxProofRetries/,
    );
  });
});
