import { x402Client } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentResponseHeader,
  encodePaymentSignatureHeader,
} from "@x402/core/http";
import {
  PaymentPayloadV2Schema,
  PaymentRequiredV2Schema,
  PaymentRequirementsV2Schema,
} from "@x402/core/schemas";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { recoverTypedDataAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { decodeJsonHeader, encodeJsonHeader, HeaderName } from "./header.ts";
import { chainIdOf } from "./network.ts";
import { authorizationMessage, tokenDomain, transferWithAuthorizationTypes } from "./signedPayment.ts";
import {
  X402_VERSION,
  X402ExactEip3009PayloadSchema,
  X402ExactRequirementsSchema,
  X402PaymentPayloadSchema,
  type X402PaymentRequired,
  X402PaymentRequiredSchema,
  X402SettleResponseSchema,
  X402SupportedResponseSchema,
  X402VerifyRequestSchema,
  X402VerifyResponseSchema,
} from "./x402.ts";

// anvil's first well-known development key: never holds value anywhere.
const payer = privateKeyToAccount("0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80");
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

/** The PAYMENT-REQUIRED object of docs/x402.md as a gate would emit it. */
const paymentRequired: X402PaymentRequired = {
  x402Version: 2,
  error: "PaymentRequired",
  resource: {
    url: "http://127.0.0.1:4021/v1/forecast",
    description: "Forecast",
    mimeType: "application/json",
  },
  accepts: [
    {
      scheme: "exact",
      network: "eip155:31337",
      amount: "500000",
      asset: TOKEN,
      payTo: PAY_TO,
      maxTimeoutSeconds: 300,
      extra: { name: "USD Coin", version: "2" },
    },
  ],
};

describe("x402 v2 compatibility", () => {
  it("emits a PAYMENT-REQUIRED header that x402's own decoder and schema accept", () => {
    expect(X402_VERSION).toBe(2);
    const header = encodeJsonHeader(X402PaymentRequiredSchema.parse(paymentRequired));
    const decoded = decodePaymentRequiredHeader(header);
    expect(PaymentRequiredV2Schema.safeParse(decoded).success).toBe(true);
    expect(decoded).toEqual(paymentRequired);
    expect(X402ExactRequirementsSchema.parse(decoded.accepts[0]).asset).toBe(TOKEN);
  });

  it("reads the PAYMENT-SIGNATURE an x402 client makes, and its EIP-3009 signature verifies", async () => {
    // x402 clients only pay tokens they know unless told otherwise: a devnet token must be opted in.
    const client = x402Client.fromConfig({
      schemes: [{ network: "eip155:31337", client: new ExactEvmScheme(payer) }],
      spendControls: {
        allowedAssets: [{ network: "eip155:31337", asset: TOKEN, maxAmountPerPayment: "1000000" }],
      },
    });
    // x402's TypeScript type lacks the `null`s its runtime schema (and ours) accept; the value has none.
    const payload = await client.createPaymentPayload(
      decodePaymentRequiredHeader(encodeJsonHeader(paymentRequired)),
    );
    expect(PaymentPayloadV2Schema.safeParse(payload).success).toBe(true);
    const header = encodePaymentSignatureHeader(payload);

    const received = decodeJsonHeader(header, X402PaymentPayloadSchema);
    const accepted = X402ExactRequirementsSchema.parse(received.accepted);
    const exact = X402ExactEip3009PayloadSchema.parse(received.payload);
    expect(exact.authorization.from).toBe(payer.address);
    expect(exact.authorization.to).toBe(PAY_TO);
    expect(exact.authorization.value).toBe("500000");
    const recovered = await recoverTypedDataAddress({
      domain: tokenDomain({
        name: accepted.extra.name,
        version: accepted.extra.version,
        chainId: chainIdOf(accepted.network),
        verifyingContract: accepted.asset,
      }),
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: authorizationMessage(exact.authorization),
      signature: exact.signature,
    });
    expect(recovered).toBe(payer.address);
  });

  it("keeps fields it does not know when relaying a payload", () => {
    const withExtras = {
      x402Version: 2,
      accepted: { ...paymentRequired.accepts[0], futureField: 1 },
      payload: { authorization: {}, signature: "0x" },
      extensions: { bazaar: { info: {} } },
      somethingNew: true,
    };
    expect(X402PaymentPayloadSchema.parse(withExtras)).toEqual(withExtras);
  });

  it("accepts the null x402 allows where it allows it", () => {
    const parsed = X402PaymentRequiredSchema.parse({
      ...paymentRequired,
      error: null,
      resource: { url: "http://x", description: null },
      extensions: null,
    });
    expect(parsed.error).toBeNull();
  });

  it("writes a PAYMENT-RESPONSE that x402 decodes, and reads one x402 encodes", () => {
    const settle = {
      success: true,
      transaction: `0x${"ab".repeat(32)}`,
      network: "eip155:31337",
      payer: payer.address,
    };
    expect(decodePaymentResponseHeader(encodeJsonHeader(X402SettleResponseSchema.parse(settle)))).toEqual(
      settle,
    );
    expect(decodeJsonHeader(encodePaymentResponseHeader(settle as never), X402SettleResponseSchema)).toEqual(
      settle,
    );
    expect(HeaderName.X402PaymentResponse).toBe("PAYMENT-RESPONSE");
  });

  it("accepts facilitator bodies in the shapes x402's HTTP facilitator client sends and expects", () => {
    const requirements = PaymentRequirementsV2Schema.parse(paymentRequired.accepts[0]);
    const request = {
      x402Version: 2,
      paymentPayload: { x402Version: 2, accepted: requirements, payload: { signature: "0x" } },
      paymentRequirements: requirements,
    };
    expect(X402VerifyRequestSchema.safeParse(request).success).toBe(true);
    expect(
      X402VerifyResponseSchema.parse({ isValid: false, invalidReason: "invalid_exact_evm_signature" })
        .isValid,
    ).toBe(false);
    expect(
      X402SupportedResponseSchema.parse({
        kinds: [{ x402Version: 2, scheme: "exact", network: "eip155:31337" }],
      }),
    ).toEqual({
      kinds: [{ x402Version: 2, scheme: "exact", network: "eip155:31337" }],
      extensions: [],
      signers: {},
    });
  });

  it.each([
    ["a non-exact scheme", { scheme: "upto" }],
    ["a missing EIP-712 domain", { extra: {} }],
    [
      "a permit2 transfer method",
      { extra: { name: "USD Coin", version: "2", assetTransferMethod: "permit2" } },
    ],
    ["a fractional amount", { amount: "0.5" }],
    ["a non-EVM network", { network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp" }],
  ])("refuses %s as a Tollgate exact requirement", (_name, change) => {
    expect(X402ExactRequirementsSchema.safeParse({ ...paymentRequired.accepts[0], ...change }).success).toBe(
      false,
    );
  });
});
