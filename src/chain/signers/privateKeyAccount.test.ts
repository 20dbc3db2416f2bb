import fc from "fast-check";
import { type Hex, keccak256, recoverTransactionAddress, recoverTypedDataAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import {
  address,
  hexOf,
  privateKey,
  tokenDomain,
  transferAuthorization as transfer,
} from "../../../test/support/transferArbitraries.ts";
import { permitTypes, transferWithAuthorizationTypes } from "./eip712Types.ts";
import { asPlainEip1559, transactionHashOf } from "./eip1559Encoding.ts";
import { privateKeyAccount, transferDigestOf } from "./privateKeyAccount.ts";

/** Token domains with the chain id as a number or a bigint, both of which viem takes. */
const domain = tokenDomain.chain((d) => fc.constantFrom(d, { ...d, chainId: BigInt(d.chainId) }));

describe("privateKeyAccount", () => {
  it("signs EIP-3009 transfers byte for byte as viem's account does", async () => {
    await fc.assert(
      fc.asyncProperty(privateKey, domain, transfer, async (key, d, message) => {
        const parameters = {
          domain: d,
          types: transferWithAuthorizationTypes,
          primaryType: "TransferWithAuthorization" as const,
          message,
        };
        // The fast path signs it (not viem behind it).
        expect(transferDigestOf(parameters)).toBeInstanceOf(Uint8Array);
        const fast = await privateKeyAccount(key).signTypedData(parameters);
        expect(fast).toBe(await privateKeyToAccount(key).signTypedData(parameters));
        expect(await recoverTypedDataAddress({ ...parameters, signature: fast })).toBe(
          privateKeyToAccount(key).address,
        );
      }),
      { numRuns: 100 },
    );
  });

  it("signs transactions and hashes byte for byte as viem's account does", async () => {
    const gwei = fc.bigInt({ min: 0n, max: 10n ** 12n });
    const eip1559 = fc
      .record({
        type: fc.constant("eip1559" as const),
        chainId: fc.integer({ min: 1, max: 2 ** 31 }),
        nonce: fc.integer({ min: 0, max: 2 ** 31 }),
        to: address,
        value: fc.bigInt({ min: 0n, max: 10n ** 24n }),
        data: fc.uint8Array({ maxLength: 200 }).map(hexOf),
        gas: fc.bigInt({ min: 21_000n, max: 30_000_000n }),
        maxFeePerGas: gwei,
        maxPriorityFeePerGas: gwei,
      })
      .map((t) => ({ ...t, maxFeePerGas: t.maxFeePerGas + t.maxPriorityFeePerGas }));
    const legacy = fc.record({
      type: fc.constant("legacy" as const),
      chainId: fc.integer({ min: 1, max: 2 ** 31 }),
      nonce: fc.integer({ min: 0, max: 2 ** 31 }),
      to: address,
      value: fc.bigInt({ min: 0n, max: 10n ** 24n }),
      gas: fc.bigInt({ min: 21_000n, max: 30_000_000n }),
      gasPrice: gwei,
    });
    await fc.assert(
      fc.asyncProperty(
        privateKey,
        fc.oneof(eip1559, legacy),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        async (key, transaction, hash) => {
          const fast = privateKeyAccount(key);
          const viem = privateKeyToAccount(key);
          expect(await fast.signTransaction(transaction)).toBe(await viem.signTransaction(transaction));
          expect(await fast.sign?.({ hash: hexOf(hash) })).toBe(await viem.sign({ hash: hexOf(hash) }));
        },
      ),
      { numRuns: 60 },
    );
  });

  it("encodes plain EIP-1559 transactions itself, byte for byte as viem: zero fields, long calldata", async () => {
    const uint = (max: bigint) => fc.oneof(fc.constant(0n), fc.constant(1n), fc.bigInt({ min: 0n, max }));
    const transaction = fc
      .record({
        type: fc.constant("eip1559" as const),
        chainId: fc.oneof(fc.constant(1), fc.constant(31337), fc.integer({ min: 1, max: 2 ** 40 })),
        nonce: fc.oneof(
          fc.constant(0),
          fc.constant(127),
          fc.constant(128),
          fc.integer({ min: 0, max: 2 ** 40 }),
        ),
        to: address,
        value: fc.option(uint((1n << 256n) - 1n), { nil: undefined }),
        // Lengths across RLP's short/long string boundary (55/56 bytes) and past 64 KB.
        data: fc
          .oneof(
            fc.uint8Array({ maxLength: 1 }),
            fc.uint8Array({ minLength: 54, maxLength: 58 }),
            fc.uint8Array({ maxLength: 2_000 }),
            fc.uint8Array({ minLength: 65_530, maxLength: 66_000 }),
          )
          .map(hexOf),
        gas: uint(30_000_000n),
        maxFeePerGas: uint(10n ** 30n),
        maxPriorityFeePerGas: uint(10n ** 12n),
      })
      .map((t) => ({ ...t, maxFeePerGas: t.maxFeePerGas + t.maxPriorityFeePerGas }));
    await fc.assert(
      fc.asyncProperty(privateKey, transaction, async (key, t) => {
        // This encoder signs it, not viem behind it.
        expect(asPlainEip1559(t)).toBe(t);
        const raw = await privateKeyAccount(key).signTransaction(t);
        expect(raw).toBe(await privateKeyToAccount(key).signTransaction(t));
        expect(transactionHashOf(raw)).toBe(keccak256(raw));
        expect(await recoverTransactionAddress({ serializedTransaction: raw as never })).toBe(
          privateKeyToAccount(key).address,
        );
      }),
      // Shrinking 64 KB arrays takes minutes: report the first failure as it is.
      { numRuns: 40, endOnFailure: true },
    );
  });

  it("leaves EIP-1559 transactions outside the plain shape to viem", async () => {
    const key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d" as const;
    const base = {
      type: "eip1559" as const,
      chainId: 1,
      nonce: 3,
      to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as const,
      gas: 21_000n,
      maxFeePerGas: 10n,
      maxPriorityFeePerGas: 1n,
    };
    expect(asPlainEip1559({ ...base, accessList: [] })).toBeDefined();
    const accessList = [{ address: base.to, storageKeys: [`0x${"00".repeat(32)}` as Hex] }];
    const others = [
      { ...base, accessList },
      { ...base, type: "eip2930" as const, gasPrice: 1n },
      { ...base, data: "0x123" as Hex },
      { ...base, to: "0x70997970c51812dc3a010c7d01b50e0d17dc79C8" as const },
    ];
    for (const t of others) expect(asPlainEip1559(t)).toBeUndefined();
    // viem signs the access list transaction, and refuses what it refuses (a bad checksum, a tip above
    // the fee cap) with its own errors.
    const fast = privateKeyAccount(key);
    const viem = privateKeyToAccount(key);
    expect(await fast.signTransaction({ ...base, accessList })).toBe(
      await viem.signTransaction({ ...base, accessList }),
    );
    await expect(fast.signTransaction({ ...base, maxPriorityFeePerGas: 11n })).rejects.toThrow(/tip/i);
    await expect(fast.signTransaction(others[3] as never)).rejects.toThrow(/Address/);
  });

  it("leaves every other signature to viem: other types, other domains, messages", async () => {
    const key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d" as const;
    const fast = privateKeyAccount(key);
    const viem = privateKeyToAccount(key);
    expect(fast.address).toBe(viem.address);
    const permit = {
      domain: { name: "USD Coin", version: "2", chainId: 1, verifyingContract: viem.address },
      types: permitTypes,
      primaryType: "Permit" as const,
      message: { owner: viem.address, spender: viem.address, value: 1n, nonce: 0n, deadline: 9n },
    };
    expect(await fast.signTypedData(permit)).toBe(await viem.signTypedData(permit));
    // A domain with a salt is not the plain token domain: viem hashes it.
    const salted = {
      domain: {
        name: "USD Coin",
        version: "2",
        chainId: 1,
        verifyingContract: viem.address,
        salt: `0x${"11".repeat(32)}` as Hex,
      },
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization" as const,
      message: {
        from: viem.address,
        to: viem.address,
        value: 1n,
        validAfter: 0n,
        validBefore: 9n,
        nonce: `0x${"22".repeat(32)}` as Hex,
      },
    };
    expect(await fast.signTypedData(salted)).toBe(await viem.signTypedData(salted));
    expect(transferDigestOf(permit)).toBeUndefined();
    expect(
      transferDigestOf({ ...permit, primaryType: "TransferWithAuthorization", types: undefined }),
    ).toBeUndefined();
    expect(transferDigestOf(salted)).toBeUndefined();
    // A value out of range is refused by viem, as before.
    const { salt: _salt, ...plainDomain } = salted.domain;
    const tooLarge = { ...salted, domain: plainDomain, message: { ...salted.message, value: 1n << 256n } };
    expect(transferDigestOf(tooLarge)).toBeUndefined();
    await expect(fast.signTypedData(tooLarge)).rejects.toThrow();
    expect(await fast.signMessage({ message: "hello" })).toBe(await viem.signMessage({ message: "hello" }));
  });
});
