import { Hono } from "hono";
import { type Address, verifyTypedData } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { transferWithAuthorizationTypes } from "../chain/signers/eip712Types.ts";
import { jwksOf, proofKeyFromSeed, signPaymentProof } from "../facilitator/proofKeys.ts";
import { honoPaymentGate } from "../gate/honoPaymentGate.ts";
import { sealMemo } from "../gate/memo.ts";
import { paymentGate } from "../gate/paymentGate.ts";
import type { FacilitatorClient } from "../http/facilitatorClient.ts";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { SupportedResponse } from "../protocol/facilitator.ts";
import { decodeJsonHeader } from "../protocol/header.ts";
import { memoNonce } from "../protocol/memo.ts";
import { PaymentProofSchema } from "../protocol/paymentProof.ts";
import type { PaymentOption, PaymentRequired } from "../protocol/paymentRequired.ts";
import type { SignedPayment } from "../protocol/signedPayment.ts";
import { createPayer } from "./createPayer.ts";

const account = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3" as Address;
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Address;
const FACILITATOR = "http://facilitator.test";
const START_MS = 1_763_800_000_000;
const proofKey = proofKeyFromSeed(new Uint8Array(32).fill(1));

const supported: SupportedResponse = {
  version: "1",
  schemes: ["exact"],
  networks: [
    {
      network: "eip155:31337",
      tokens: [{ address: TOKEN, symbol: "USDC", decimals: 6, eip712: { name: "USD Coin", version: "2" } }],
    },
  ],
};

/**
 * The facilitator client as an object: records what the payer sends and answers like `/authorize`
 * would, so that what the payer signs can be checked. The payer's HTTP path is covered end to end
 * against the real facilitator in test/oneTime.e2e.test.ts.
 */
function recordingFacilitator(
  options: { proofOverrides?: Record<string, unknown>; supportedCalls?: number[] } = {},
) {
  const sent: SignedPayment[] = [];
  const client: FacilitatorClient = {
    url: FACILITATOR,
    async authorize(signedPayment) {
      sent.push(signedPayment);
      const now = Math.floor(START_MS / 1000);
      const proof = signPaymentProof(proofKey, {
        v: "1",
        scheme: "exact",
        network: signedPayment.network,
        token: signedPayment.token,
        amount: signedPayment.authorization.value,
        payer: signedPayment.authorization.from,
        payTo: signedPayment.authorization.to,
        memo: signedPayment.memo,
        tx: `0x${"77".repeat(32)}`,
        iat: now,
        exp: now + 300,
        ...options.proofOverrides,
      } as never);
      return { proof };
    },
    verify: async () => ({ valid: true }),
    jwks: async () => jwksOf([proofKey]),
    supported: async () => {
      options.supportedCalls?.push(1);
      return supported;
    },
    request: async () => {
      throw new Error("not used");
    },
  };
  return { client, sent };
}

function optionFor(
  clock: { now(): number },
  fields: Partial<{
    amount: string;
    payTo: Address;
    expiresIn: number;
    network: string;
    memoAmount: string;
  }> = {},
): PaymentOption {
  const amount = fields.amount ?? "500000";
  const memo = sealMemo(new Uint8Array(32).fill(2), {
    m: "GET",
    p: "/report",
    a: fields.memoAmount ?? amount,
    t: fields.payTo ?? PAY_TO,
    n: "eip155:31337",
    k: TOKEN,
    e: unixSeconds(clock) + (fields.expiresIn ?? 300),
    r: "AAAAAAAAAAAAAAAA",
  });
  return {
    scheme: "exact",
    network: (fields.network ?? "eip155:31337") as `eip155:${number}`,
    token: TOKEN,
    amount,
    payTo: fields.payTo ?? PAY_TO,
    memo,
    tollgate: { subscriptionScheme: false, facilitator: FACILITATOR },
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

describe("createPayer().pay", () => {
  it("signs EIP-3009 with nonce keccak256(memo), a window capped by the offer, and returns the proof header", async () => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const payer = createPayer({
      account,
      network: "eip155:31337",
      facilitator: client,
      clock,
      validForSeconds: 600,
    });
    const option = optionFor(clock, { expiresIn: 240 });
    const receipt = await payer.pay(option, { maxAmount: "0.50" });

    const payment = sent[0]!;
    const now = unixSeconds(clock);
    expect(payment).toMatchObject({
      scheme: "exact",
      network: "eip155:31337",
      token: TOKEN,
      memo: option.memo,
    });
    expect(payment.authorization).toEqual({
      from: account.address,
      to: PAY_TO,
      value: "500000",
      validAfter: String(now - 60),
      validBefore: String(now + 240),
      nonce: memoNonce(option.memo),
    });
    const valid = await verifyTypedData({
      address: account.address,
      domain: { name: "USD Coin", version: "2", chainId: 31337, verifyingContract: TOKEN },
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: {
        ...payment.authorization,
        value: 500000n,
        validAfter: BigInt(payment.authorization.validAfter),
        validBefore: BigInt(payment.authorization.validBefore),
      },
      signature: payment.signature,
    });
    expect(valid).toBe(true);
    expect(decodeJsonHeader(receipt.header, PaymentProofSchema)).toEqual(receipt.proof);
  });

  it("reads the token's EIP-712 domain from /supported once, or not at all with an override", async () => {
    const clock = createFixedClock(START_MS);
    const supportedCalls: number[] = [];
    const { client } = recordingFacilitator({ supportedCalls });
    const payer = createPayer({ account, network: "eip155:31337", facilitator: client, clock });
    await payer.pay(optionFor(clock), { maxAmount: 500_000n });
    await payer.pay(optionFor(clock), { maxAmount: 500_000n });
    expect(supportedCalls).toHaveLength(1);

    const pinned = createPayer({
      account,
      network: "eip155:31337",
      facilitator: client,
      clock,
      tokens: { [TOKEN.toLowerCase()]: { name: "USD Coin", version: "2" } },
    });
    await pinned.pay(optionFor(clock), { maxAmount: 500_000n });
    expect(supportedCalls).toHaveLength(1);
  });

  it.each([
    ["a price above the ceiling", { maxAmount: "0.49" }, {}, "PriceCeilingExceeded"],
    ["an option on another network", { maxAmount: "1" }, { network: "eip155:8453" }, "UnsupportedNetwork"],
    ["a memo that prices another amount", { maxAmount: "1" }, { memoAmount: "1" }, "InvalidRequest"],
    ["an offer about to expire", { maxAmount: "1" }, { expiresIn: 10 }, "AuthorizationExpired"],
  ] as const)("refuses %s before signing anything", async (_name, payOptions, fields, code) => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const payer = createPayer({ account, network: "eip155:31337", facilitator: client, clock });
    const error = await refusal(payer.pay(optionFor(clock, fields), payOptions));
    expect(error.code).toBe(code);
    expect(sent).toHaveLength(0);
  });

  it("refuses a subscription option and one settled through another facilitator", async () => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const payer = createPayer({ account, network: "eip155:31337", facilitator: client, clock });
    const option = optionFor(clock);
    const elsewhere = {
      ...option,
      tollgate: { subscriptionScheme: false, facilitator: "http://other.test" },
    };
    const refused = await refusal(payer.pay(elsewhere, { maxAmount: "1" }));
    expect(refused.code).toBe("InvalidRequest");
    expect(refused.message).toMatch(/another facilitator/);
    expect(refused.message).toMatch(/point the payer at the seller's facilitator \(http:\/\/other\.test\)$/);
    const subscription = {
      ...option,
      scheme: "subscription" as const,
      tollgate: { ...option.tollgate!, planId: "1", interval: 60, manager: TOKEN },
    };
    expect((await refusal(payer.pay(subscription, { maxAmount: "1" }))).code).toBe("InvalidRequest");
    expect(sent).toHaveLength(0);
  });

  it("refuses a proof the facilitator issued for other terms", async () => {
    const clock = createFixedClock(START_MS);
    const { client } = recordingFacilitator({ proofOverrides: { amount: "1" } });
    const payer = createPayer({ account, network: "eip155:31337", facilitator: client, clock });
    expect((await refusal(payer.pay(optionFor(clock), { maxAmount: "1" }))).code).toBe("InvalidPaymentProof");
  });

  it("refuses a token the facilitator does not settle", async () => {
    const clock = createFixedClock(START_MS);
    const { client } = recordingFacilitator();
    const payer = createPayer({ account, network: "eip155:31337", facilitator: client, clock });
    const other = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512" as Address;
    const memo = sealMemo(new Uint8Array(32), {
      m: "GET",
      p: "/",
      a: "1",
      t: PAY_TO,
      n: "eip155:31337",
      k: other,
      e: unixSeconds(clock) + 300,
      r: "AAAAAAAAAAAAAAAA",
    });
    const option = { ...optionFor(clock), token: other, amount: "1", memo };
    expect((await refusal(payer.pay(option, { maxAmount: "1" }))).code).toBe("UnsupportedToken");
  });

  it("refuses a misconfiguration at creation", () => {
    const { client } = recordingFacilitator();
    expect(() => createPayer({ account, network: "base", facilitator: client })).toThrow(/CAIP-2/);
    expect(() => createPayer({ account: {} as never, network: "eip155:1", facilitator: client })).toThrow(
      /account/,
    );
    expect(() =>
      createPayer({ account, network: "eip155:1", facilitator: client, validForSeconds: 99_999 }),
    ).toThrow(/validForSeconds/);
  });
});

/** The specification's `agent.pay(terms)`: `agent` is the payer, terms one 402's offer. */
describe("agent.pay(terms)", () => {
  const network = "eip155:31337";
  const bodyOf = (accepts: PaymentOption[]): PaymentRequired => ({
    version: "1",
    error: "PaymentRequired",
    message: "payment required",
    accepts,
  });

  it("pays one accepts entry called exactly so, with no options (the price it states)", async () => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const agent = createPayer({ account, network, facilitator: client, clock });
    const terms = optionFor(clock);
    const receipt = await agent.pay(terms);
    expect(receipt.option).toBe(terms);
    expect(receipt.proof).toMatchObject({ amount: "500000", payTo: PAY_TO, memo: terms.memo });
    expect(receipt.header).toMatch(/^[A-Za-z0-9+/]+=*$/);
    expect(sent).toHaveLength(1);
  });

  it("pays the cheapest option it can pay once of a whole 402 body, within maxAmount when given", async () => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const agent = createPayer({ account, network, facilitator: client, clock });
    const cheap = optionFor(clock, { amount: "200000" });
    const dear = optionFor(clock, { amount: "900000" });
    const elsewhere = optionFor(clock, { amount: "1", network: "eip155:8453" });
    const plan: PaymentOption = {
      ...optionFor(clock, { amount: "100" }),
      scheme: "subscription",
      tollgate: {
        planId: "1",
        interval: 60,
        subscriptionScheme: true,
        facilitator: FACILITATOR,
        manager: TOKEN,
      },
    };
    const receipt = await agent.pay(bodyOf([dear, plan, elsewhere, cheap]));
    expect(receipt.option.memo).toBe(cheap.memo);
    expect(sent.map((s) => s.authorization.value)).toEqual(["200000"]);

    const ceiling = await refusal(agent.pay(bodyOf([dear]), { maxAmount: "0.50" }));
    expect(ceiling.code).toBe("PriceCeilingExceeded");
    const foreign = await refusal(agent.pay(bodyOf([elsewhere, plan])));
    expect(foreign.code).toBe("UnsupportedNetwork");
    expect(sent).toHaveLength(1);
  });

  it("pays the 402 Response itself and leaves its body readable", async () => {
    const clock = createFixedClock(START_MS);
    const { client } = recordingFacilitator();
    const agent = createPayer({ account, network, facilitator: client, clock });
    const terms = optionFor(clock);
    const response = new Response(JSON.stringify(bodyOf([terms])), {
      status: 402,
      headers: { "content-type": "application/json" },
    });
    const receipt = await agent.pay(response);
    expect(receipt.option.memo).toBe(terms.memo);
    expect(((await response.json()) as PaymentRequired).accepts).toHaveLength(1);
  });

  it.each([
    ["nothing", undefined, "InvalidRequest", /accepts/],
    ["null", null, "InvalidRequest", /accepts/],
    ["a number", 42, "InvalidRequest", /accepts/],
    ["text that is not a URL", "pay me", "InvalidRequest", /accepts/],
    ["an unrelated object", { price: "0.50" }, "InvalidRequest", /accepts/],
    ["an option without its fields", { scheme: "exact" }, "InvalidRequest", /not a valid 402 option/],
    ["a 402 body without options", { version: "1", accepts: [] }, "InvalidRequest", /not a valid 402 body/],
    ["a 200 response", new Response("ok"), "InvalidRequest", /200 response/],
    ["a 402 without terms", new Response("pay", { status: 402 }), "InvalidRequest", /no payment terms/],
  ])("refuses %s with a typed error, signing nothing", async (_name, terms, code, message) => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const agent = createPayer({ account, network, facilitator: client, clock });
    const error = await refusal(agent.pay(terms as never));
    expect(error.code).toBe(code);
    expect(error.message).toMatch(message);
    expect(sent).toHaveLength(0);
  });

  it("refuses options that are not options, and a negative or float ceiling", async () => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const agent = createPayer({ account, network, facilitator: client, clock });
    const terms = optionFor(clock);
    expect((await refusal(agent.pay(terms, "0.50" as never))).code).toBe("InvalidRequest");
    expect((await refusal(agent.pay(terms, { maxAmount: -1n }))).code).toBe("InvalidAmount");
    expect((await refusal(agent.pay(terms, { maxAmount: 0.5 as never }))).code).toBe("InvalidAmount");
    expect((await refusal(agent.pay(terms, { signal: "stop" as never }))).code).toBe("InvalidRequest");
    expect(sent).toHaveLength(0);
  });

  it("given a URL, requests it, pays its 402 and returns the paid answer with the receipt", async () => {
    const clock = createFixedClock(START_MS);
    const { client, sent } = recordingFacilitator();
    const gate = paymentGate({
      payTo: PAY_TO,
      network,
      token: { address: TOKEN, name: "USD Coin", version: "2" },
      facilitator: FACILITATOR,
      fetch: async () => {
        throw new Error("no network in unit tests");
      },
      memoSecret: "agent-pay-terms-test-secret-at-least-32-bytes",
      clock,
      proofKeys: jwksOf([proofKey]),
      routes: { "GET /report": { price: "0.50" } },
    });
    const app = new Hono();
    app.use("*", honoPaymentGate(gate));
    app.get("/report", (c) => c.json({ report: "quarterly" }));
    const agent = createPayer({
      account,
      network,
      facilitator: client,
      clock,
      fetch: async (input, init) => app.fetch(new Request(input, init)),
    });

    const { response, receipt } = await agent.pay("http://api.test/report", { maxAmount: "0.50" });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ report: "quarterly" });
    expect(receipt?.proof.amount).toBe("500000");
    expect(sent).toHaveLength(1);

    // The price comes from the server: without a ceiling nothing is requested or paid.
    const unbounded = await refusal(agent.pay("http://api.test/report" as never));
    expect(unbounded.message).toMatch(/maxAmount/);
    const tooDear = await refusal(agent.pay(new URL("http://api.test/report"), { maxAmount: "0.10" }));
    expect(tooDear.code).toBe("PriceCeilingExceeded");
    expect(sent).toHaveLength(1);
  });
});

describe("the payer's inputs", () => {
  it("are refused with typed errors, never a TypeError", async () => {
    const { client } = recordingFacilitator();
    const invalid = (run: () => unknown) => {
      try {
        run();
      } catch (error) {
        return error instanceof TollgateError ? error.code : `untyped: ${String(error)}`;
      }
      return "accepted";
    };
    expect(invalid(() => createPayer(undefined as never))).toBe("InvalidRequest");
    expect(invalid(() => createPayer({ account, network: "eip155:1", facilitator: 7 as never }))).toBe(
      "InvalidRequest",
    );
    expect(
      invalid(() => createPayer({ account, network: "eip155:1", facilitator: client, fetch: "x" as never })),
    ).toBe("InvalidRequest");
    const payer = createPayer({ account, network: "eip155:31337", facilitator: client });
    expect((await refusal(payer.subscribe(undefined as never))).code).toBe("InvalidRequest");
    expect((await refusal(payer.subscribe({ planId: "three" }))).code).toBe("InvalidRequest");
    expect((await refusal(payer.subscribe({ planId: 1.5 }))).code).toBe("InvalidRequest");
    expect((await refusal(payer.subscribe({ planId: 3, maxOverage: Number.NaN }))).code).toBe(
      "InvalidAmount",
    );
    expect((await refusal(payer.subscribe({ planId: 3, maxOverage: 0.1 + 0.2 }))).code).toBe("InvalidAmount");
    expect((await refusal(payer.subscribe({ planId: 3, maxOverage: -2 }))).code).toBe("InvalidAmount");
    expect((await refusal(payer.setMaxOverage(1n, Number.POSITIVE_INFINITY))).code).toBe("InvalidAmount");
    expect((await refusal(payer.pause("1; DROP"))).code).toBe("InvalidRequest");
  });
});
