import { authorizationTypes as x402AuthorizationTypes } from "@x402/evm";
import { keccak256, recoverTypedDataAddress, toBytes } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { memoNonce } from "./memo.ts";
import { chainIdOf } from "./network.ts";
import {
  AuthorizeRequestSchema,
  authorizationMessage,
  cancelAuthorizationTypes,
  receiveWithAuthorizationTypes,
  SignedPaymentSchema,
  tokenDomain,
  transferWithAuthorizationTypes,
} from "./signedPayment.ts";

// anvil's first well-known development key: never holds value anywhere.
const payer = privateKeyToAccount("0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80");
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const MEMO = `${"e30"}.${"A".repeat(43)}`;

function encodeType(types: Record<string, readonly { name: string; type: string }[]>): string {
  const [name, fields] = Object.entries(types)[0]!;
  return `${name}(${fields.map((f) => `${f.type} ${f.name}`).join(",")})`;
}

describe("EIP-3009 typed data", () => {
  it("has the type hashes EIP-3009 specifies", () => {
    expect(keccak256(toBytes(encodeType(transferWithAuthorizationTypes)))).toBe(
      "0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267",
    );
    expect(keccak256(toBytes(encodeType(receiveWithAuthorizationTypes)))).toBe(
      "0xd099cc98ef71107a616c4f0f941f04c322d8e254fe26b3c6668db87aae413de8",
    );
    expect(keccak256(toBytes(encodeType(cancelAuthorizationTypes)))).toBe(
      "0x158b0a9edf7a828aad02f63cd515c68ef2f50ba807396f6d12842833a1597429",
    );
  });

  it("is the same TransferWithAuthorization type x402's exact EVM scheme signs", () => {
    expect(transferWithAuthorizationTypes).toEqual(x402AuthorizationTypes);
  });

  it("signs with viem and recovers the payer from the wire form", async () => {
    const network = "eip155:31337";
    const authorization = {
      from: payer.address,
      to: PAY_TO,
      value: "500000",
      validAfter: "0",
      validBefore: "1763800300",
      nonce: memoNonce(MEMO),
    } as const;
    const domain = tokenDomain({
      name: "USD Coin",
      version: "2",
      chainId: chainIdOf(network),
      verifyingContract: TOKEN,
    });
    const signature = await payer.signTypedData({
      domain,
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: authorizationMessage(authorization),
    });
    const body = AuthorizeRequestSchema.parse(
      JSON.parse(
        JSON.stringify({
          signedPayment: {
            scheme: "exact",
            network,
            token: TOKEN.toLowerCase(),
            memo: MEMO,
            authorization,
            signature,
          },
        }),
      ),
    );
    const parsed = body.signedPayment;
    expect(parsed.token).toBe(TOKEN);
    expect(parsed.authorization.nonce).toBe(memoNonce(parsed.memo));
    const recovered = await recoverTypedDataAddress({
      domain: tokenDomain({
        name: "USD Coin",
        version: "2",
        chainId: chainIdOf(parsed.network),
        verifyingContract: parsed.token,
      }),
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: authorizationMessage(parsed.authorization),
      signature: parsed.signature,
    });
    expect(recovered).toBe(payer.address);
  });

  it("converts uint256 strings to bigint for signing", () => {
    const message = authorizationMessage({
      from: payer.address,
      to: PAY_TO,
      value: "115792089237316195423570985008687907853269984665640564039457584007913129639935",
      validAfter: "1",
      validBefore: "2",
      nonce: `0x${"00".repeat(32)}`,
    });
    expect(message.value).toBe(2n ** 256n - 1n);
    expect([message.validAfter, message.validBefore]).toEqual([1n, 2n]);
  });
});

describe("SignedPaymentSchema", () => {
  const valid = {
    scheme: "exact",
    network: "eip155:31337",
    token: TOKEN,
    memo: MEMO,
    authorization: {
      from: payer.address,
      to: PAY_TO,
      value: "500000",
      validAfter: "0",
      validBefore: "1763800300",
      nonce: `0x${"11".repeat(32)}`,
    },
    signature: `0x${"22".repeat(65)}`,
  };

  it("accepts the body of POST /authorize", () => {
    expect(SignedPaymentSchema.safeParse(valid).success).toBe(true);
  });

  it.each([
    ["a subscription scheme", { ...valid, scheme: "subscription" }],
    ["a 64-byte signature", { ...valid, signature: `0x${"22".repeat(64)}` }],
    ["a decimal value", { ...valid, authorization: { ...valid.authorization, value: "0.5" } }],
    ["a numeric timestamp", { ...valid, authorization: { ...valid.authorization, validBefore: 1763800300 } }],
    ["a short nonce", { ...valid, authorization: { ...valid.authorization, nonce: "0x11" } }],
    ["a non-CAIP network", { ...valid, network: "base" }],
    ["a missing memo", { ...valid, memo: undefined }],
  ])("refuses %s", (_name, body) => {
    expect(SignedPaymentSchema.safeParse(body).success).toBe(false);
  });
});
