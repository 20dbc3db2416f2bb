import { x402Client } from "@x402/core/client";
import { decodePaymentSignatureHeader } from "@x402/core/http";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { Hono } from "hono";
import { type Address, verifyTypedData } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { transferWithAuthorizationTypes } from "../../../chain/signers/eip712Types.ts";
import { createPayer } from "../../../client/createPayer.ts";
import { fetchWithPayment } from "../../../client/fetchWithPayment.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { createFixedClock, unixSeconds } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SupportedResponse } from "../../../protocol/facilitator.ts";
import { decodeJsonHeader, encodeJsonHeader } from "../../../protocol/header.ts";
import {
  X402ExactEip3009PayloadSchema,
  X402PaymentPayloadSchema,
  type X402PaymentRequired,
  type X402PaymentRequirements,
} from "../../../protocol/x402.ts";
import { createPayX402, createX402Payment, MAX_AUTHORIZATION_SECONDS, type X402Payer } from "./payX402.ts";

const account = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const NETWORK = "eip155:31337" as const;
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3" as Address;
const OTHER_TOKEN = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512" as Address;
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Address;
const START_MS = 1_763_800_000_000;
const DOMAIN = { name: "USD Coin", version: "2" };

const supported: SupportedResponse = {
  version: "1",
  schemes: ["exact"],
  networks: [
    {
      network: NETWORK,
      tokens: [{ address: TOKEN, symbol: "USDC", decimals: 6, eip712: DOMAIN }],
    },
  ],
};

/** A facilitator client that only lists tokens: x402 payments never go through the payer's facilitator. */
function listingFacilitator(calls: string[] = []): FacilitatorClient {
  const refuse = async (): Promise<never> => {
    throw new Error("an x402 payment must not reach the payer's facilitator");
  };
  return {
    url: "http://facilitator.test",
    authorize: refuse,
    verify: refuse,
    jwks: refuse,
    request: refuse,
    async supported() {
      calls.push("supported");
      return supported;
    },
  };
}

function option(overrides: Partial<X402PaymentRequirements> = {}): X402PaymentRequirements {
  return {
    scheme: "exact",
    network: NETWORK,
    amount: "10000",
    asset: TOKEN,
    payTo: PAY_TO,
    maxTimeoutSeconds: 120,
    extra: { ...DOMAIN },
    ...overrides,
  };
}

function required(...accepts: X402PaymentRequirements[]): X402PaymentRequired {
  return {
    x402Version: 2,
    error: "Payment required",
    resource: { url: "http://api.test/weather", description: "weather", mimeType: "application/json" },
    accepts,
  };
}

/** A signer that counts signatures, so that a refusal can be shown to have signed nothing. */
function countingPayer(facilitator: FacilitatorClient = listingFacilitator()) {
  const signed: unknown[] = [];
  const payer: X402Payer = {
    network: NETWORK,
    facilitator,
    account: {
      address: account.address,
      signTypedData: async (parameters) => {
        signed.push(parameters);
        return account.signTypedData(parameters);
      },
    },
  };
  return { payer, signed };
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

describe("createX402Payment", () => {
  it("signs an EIP-3009 authorization for the option's token domain that recovers to the payer", async () => {
    const clock = createFixedClock(START_MS);
    const { payer } = countingPayer();
    const payment = await createX402Payment(payer, required(option()), {
      maxPrice: "0.01",
      clock,
      random: () => new Uint8Array(32).fill(5),
    });
    const { authorization, signature } = X402ExactEip3009PayloadSchema.parse(payment.payload.payload);
    expect(authorization).toEqual({
      from: account.address,
      to: PAY_TO,
      value: "10000",
      validAfter: "0",
      validBefore: String(unixSeconds(clock) + 120),
      nonce: `0x${"05".repeat(32)}`,
    });
    const valid = await verifyTypedData({
      address: account.address,
      domain: { ...DOMAIN, chainId: 31337, verifyingContract: TOKEN },
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: {
        ...authorization,
        value: BigInt(authorization.value),
        validAfter: 0n,
        validBefore: BigInt(authorization.validBefore),
      },
      signature,
    });
    expect(valid).toBe(true);
    expect(payment.amount).toBe(10_000n);
  });

  it("builds the payload @x402/evm's exact client builds, decodable by @x402/core", async () => {
    const offered = required(option());
    const { payer } = countingPayer();
    const ours = await createX402Payment(payer, offered, { maxPrice: "1" });
    const theirs = await new x402Client()
      .register(NETWORK, new ExactEvmScheme(account))
      .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: TOKEN }] })
      .createPaymentPayload(offered as Parameters<x402Client["createPaymentPayload"]>[0]);

    expect(ours.header.name).toBe("PAYMENT-SIGNATURE");
    const decoded = decodePaymentSignatureHeader(ours.header.value);
    expect(decoded).toEqual(ours.payload);
    expect(Object.keys(decoded).sort()).toEqual(
      Object.keys(theirs)
        .filter((key) => (theirs as Record<string, unknown>)[key] !== undefined)
        .sort(),
    );
    expect(decoded.accepted).toEqual(theirs.accepted);
    expect(decoded.resource).toEqual(theirs.resource);
    expect(decoded.x402Version).toBe(2);
    const mine = decoded.payload.authorization as Record<string, string>;
    const reference = theirs.payload.authorization as Record<string, string>;
    expect(Object.keys(mine).sort()).toEqual(Object.keys(reference).sort());
    for (const field of ["from", "to", "value", "validAfter"]) expect(mine[field]).toBe(reference[field]);
    expect(mine.nonce).not.toBe(reference.nonce);
    expect(X402PaymentPayloadSchema.safeParse(decoded).success).toBe(true);
  });

  it("passes `accepted` back exactly as the server sent it, unknown fields included", async () => {
    const odd = option({ extra: { ...DOMAIN, paymentFlow: "upfront" }, vendorField: [1, "two"] });
    const { payer } = countingPayer();
    const payment = await createX402Payment(
      payer,
      { ...required(odd), extensions: { bazaar: { a: 1 } } },
      {
        maxPrice: "1",
      },
    );
    expect(payment.payload.accepted).toEqual(odd);
    expect(payment.payload.extensions).toEqual({ bazaar: { a: 1 } });
  });

  it("pays the cheapest payable option, skipping other networks, schemes, Permit2 and unknown tokens", async () => {
    const { payer } = countingPayer();
    const cheapestPayable = option({ amount: "3000" });
    const payment = await createX402Payment(
      payer,
      required(
        option({ amount: "1", network: "eip155:8453" }),
        option({ amount: "1", scheme: "upto" }),
        option({ amount: "1", extra: { ...DOMAIN, assetTransferMethod: "permit2" } }),
        option({ amount: "1", asset: OTHER_TOKEN }),
        option({ amount: "1", extra: {} }),
        option({ amount: "5000" }),
        cheapestPayable,
        option({ amount: "3000", payTo: OTHER_TOKEN }),
      ),
      { maxPrice: "1" },
    );
    expect(payment.requirements).toBe(cheapestPayable);
  });

  it("refuses, having signed nothing, when no option is payable within the ceiling", async () => {
    const { payer, signed } = countingPayer();
    const elsewhere = await refusal(
      createX402Payment(payer, required(option({ network: "eip155:8453" })), { maxPrice: "1" }),
    );
    expect(elsewhere.code).toBe("UnsupportedNetwork");
    const unknownToken = await refusal(
      createX402Payment(payer, required(option({ asset: OTHER_TOKEN })), { maxPrice: "1" }),
    );
    expect(unknownToken.code).toBe("UnsupportedToken");
    const pricey = await refusal(
      createX402Payment(payer, required(option({ amount: "10001" })), { maxPrice: 10_000n }),
    );
    expect(pricey.code).toBe("PriceCeilingExceeded");
    expect(pricey.details).toMatchObject({ cheapest: "10001", maxPrice: "10000" });
    expect(signed).toHaveLength(0);
  });

  it("pays assets given in allowedAssets without asking the facilitator", async () => {
    const calls: string[] = [];
    const { payer } = countingPayer(listingFacilitator(calls));
    const payment = await createX402Payment(payer, required(option({ asset: OTHER_TOKEN })), {
      maxPrice: "1",
      allowedAssets: [OTHER_TOKEN.toLowerCase()],
    });
    expect(payment.requirements.asset).toBe(OTHER_TOKEN);
    expect(calls).toEqual([]);
  });

  it("keeps an authorization spendable for at most an hour, whatever maxTimeoutSeconds says", async () => {
    const clock = createFixedClock(START_MS);
    const { payer } = countingPayer();
    const payment = await createX402Payment(payer, required(option({ maxTimeoutSeconds: 86_400 * 365 })), {
      maxPrice: "1",
      clock,
    });
    const { authorization } = X402ExactEip3009PayloadSchema.parse(payment.payload.payload);
    expect(BigInt(authorization.validBefore)).toBe(BigInt(unixSeconds(clock) + MAX_AUTHORIZATION_SECONDS));
  });

  it("uses a fresh random nonce for every payment", async () => {
    const { payer } = countingPayer();
    const nonces = new Set<string>();
    for (let i = 0; i < 5; i++) {
      const payment = await createX402Payment(payer, required(option()), { maxPrice: "1" });
      nonces.add(X402ExactEip3009PayloadSchema.parse(payment.payload.payload).authorization.nonce);
    }
    expect(nonces.size).toBe(5);
  });
});

describe("createPayX402", () => {
  it("reads the facilitator's token list once after it succeeds", async () => {
    const calls: string[] = [];
    const { payer } = countingPayer(listingFacilitator(calls));
    const pay = createPayX402(payer);
    const context = { request: new Request("http://api.test/weather"), maxPrice: 1_000_000n };
    await pay(required(option()), context);
    await pay(required(option()), context);
    expect(calls).toEqual(["supported"]);
  });
});

describe("fetchWithPayment and x402-only servers", () => {
  /** An x402-only server: 402 with PAYMENT-REQUIRED and an HTML body; a decodable payment gets 200. */
  function x402Server() {
    const received: unknown[] = [];
    const app = new Hono();
    app.get("/weather", (c) => {
      const header = c.req.header("PAYMENT-SIGNATURE");
      if (header !== undefined) {
        const payload = decodeJsonHeader(header, X402PaymentPayloadSchema);
        received.push(payload);
        return c.json({ forecast: "sunny" });
      }
      return c.html("<h1>Payment required</h1>", 402, {
        "PAYMENT-REQUIRED": encodeJsonHeader(required(option())),
      });
    });
    return {
      received,
      fetch: async (input: Request | string | URL, init?: RequestInit) =>
        app.request(new Request(input, init)),
    };
  }

  it("pays by default with the payer's own account", async () => {
    const server = x402Server();
    const payer = createPayer({ account, network: NETWORK, facilitator: listingFacilitator() });
    const paidFetch = fetchWithPayment(server.fetch, payer, { maxPrice: "0.05" });
    const response = await paidFetch("http://api.test/weather");
    expect(response.status).toBe(200);
    expect(server.received).toHaveLength(1);
    expect(server.received[0]).toMatchObject({ x402Version: 2, accepted: option() });
  });

  it("does not pay by default above the ceiling", async () => {
    const server = x402Server();
    const payer = createPayer({ account, network: NETWORK, facilitator: listingFacilitator() });
    const paidFetch = fetchWithPayment(server.fetch, payer, { maxPrice: "0.005" });
    expect((await refusal(paidFetch("http://api.test/weather"))).code).toBe("PriceCeilingExceeded");
    expect(server.received).toHaveLength(0);
  });

  it("leaves x402 unpaid when a custom choose is in charge and no payX402 is given", async () => {
    const server = x402Server();
    const payer = createPayer({ account, network: NETWORK, facilitator: listingFacilitator() });
    const paidFetch = fetchWithPayment(server.fetch, payer, {
      maxPrice: "0.05",
      choose: (_options, context) => context.affordable[0],
    });
    expect((await refusal(paidFetch("http://api.test/weather"))).message).toMatch(/payX402/);
    expect(server.received).toHaveLength(0);
  });
});
