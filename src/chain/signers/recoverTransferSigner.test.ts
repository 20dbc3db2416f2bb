import fc from "fast-check";
import { getAddress, type Hex, hashTypedData, recoverTypedDataAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import {
  transferAuthorization as authorization,
  tokenDomain as domain,
  hexOf,
  MAX_UINT256,
  SECP256K1_N as N,
  privateKey,
} from "../../../test/support/transferArbitraries.ts";
import { type TokenDomain, transferWithAuthorizationTypes } from "./eip712Types.ts";
import {
  recoverTransferSigner,
  type TransferAuthorizationFields,
  transferAuthorizationDigest,
} from "./recoverTransferSigner.ts";

/** viem's answer, the reference: the recovered address, or `undefined` where it throws. */
async function viemSigner(d: TokenDomain, a: TransferAuthorizationFields, signature: Hex) {
  try {
    return await recoverTypedDataAddress({
      domain: d,
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: {
        ...a,
        value: BigInt(a.value),
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
      },
      signature,
    });
  } catch {
    return undefined;
  }
}

describe("recoverTransferSigner", () => {
  it("computes viem's EIP-712 digest for every domain and authorization", () => {
    fc.assert(
      fc.property(domain, authorization, (d, a) => {
        const expected = hashTypedData({
          domain: d,
          types: transferWithAuthorizationTypes,
          primaryType: "TransferWithAuthorization",
          message: a,
        });
        expect(hexOf(transferAuthorizationDigest(d, a))).toBe(expected);
        // Decimal strings, as authorizations travel on the wire, hash the same.
        const wire = {
          ...a,
          value: a.value.toString(),
          validAfter: a.validAfter.toString(),
          validBefore: a.validBefore.toString(),
        };
        expect(hexOf(transferAuthorizationDigest(d, wire))).toBe(expected);
      }),
      { numRuns: 300 },
    );
  });

  it("recovers the signer of every signed authorization, and agrees with viem on every v", async () => {
    await fc.assert(
      fc.asyncProperty(domain, authorization, privateKey, async (d, a, key) => {
        const account = privateKeyToAccount(key);
        const message = { ...a, from: account.address };
        const signature = await account.signTypedData({
          domain: d,
          types: transferWithAuthorizationTypes,
          primaryType: "TransferWithAuthorization",
          message,
        });
        expect(recoverTransferSigner(d, message, signature)).toBe(account.address);
        const r = signature.slice(0, 130);
        for (const v of ["00", "01", "1b", "1c", "02", "1d", "25", "ff"]) {
          const variant = `${r}${v}` as Hex;
          expect(recoverTransferSigner(d, message, variant)).toBe(await viemSigner(d, message, variant));
        }
      }),
      { numRuns: 60 },
    );
  });

  it("agrees with viem on signatures that are not a key's: random bytes and r, s at their bounds", async () => {
    const d: TokenDomain = {
      name: "USD Coin",
      version: "2",
      chainId: 31337,
      verifyingContract: getAddress("0x5fbdb2315678afecb367f032d93f642f64180aa3"),
    };
    const scalar = fc.oneof(
      fc.bigInt({ min: 0n, max: MAX_UINT256 }),
      fc.constantFrom(0n, 1n, N - 1n, N, N + 1n, MAX_UINT256),
    );
    await fc.assert(
      fc.asyncProperty(authorization, scalar, scalar, fc.constantFrom(0, 1, 27, 28), async (a, r, s, v) => {
        const signature = `0x${r.toString(16).padStart(64, "0")}${s.toString(16).padStart(64, "0")}${v
          .toString(16)
          .padStart(2, "0")}` as Hex;
        expect(recoverTransferSigner(d, a, signature)).toBe(await viemSigner(d, a, signature));
      }),
      { numRuns: 200 },
    );
  });

  it("refuses fields that are not what the type says", () => {
    const d: TokenDomain = {
      name: "USD Coin",
      version: "2",
      chainId: 1,
      verifyingContract: "0x0000000000000000000000000000000000000001",
    };
    const a: TransferAuthorizationFields = {
      from: "0x0000000000000000000000000000000000000002",
      to: "0x0000000000000000000000000000000000000003",
      value: "1",
      validAfter: "0",
      validBefore: "2",
      nonce: `0x${"00".repeat(32)}`,
    };
    expect(() => transferAuthorizationDigest(d, { ...a, value: (MAX_UINT256 + 1n).toString() })).toThrow(
      RangeError,
    );
    expect(() => transferAuthorizationDigest(d, { ...a, value: -1n })).toThrow(RangeError);
    expect(() =>
      transferAuthorizationDigest(d, { ...a, to: "0x00zz000000000000000000000000000000000003" }),
    ).toThrow(TypeError);
    expect(() => transferAuthorizationDigest(d, { ...a, nonce: "0x00" })).toThrow(TypeError);
    expect(recoverTransferSigner(d, a, "0x1234")).toBeUndefined();
  });
});
