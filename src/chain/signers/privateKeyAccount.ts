/**
 * A viem local account for a private key whose hot signatures are made by libsecp256k1
 * (tiny-secp256k1, WebAssembly) instead of @noble/curves: EIP-3009 `TransferWithAuthorization` — the
 * signature behind every one-time payment — over the hand-encoded digest of recoverTransferSigner.ts
 * (~0.28 ms here against ~0.94 ms for viem's `signTypedData`, docs/client.md), transactions (plain
 * EIP-1559 ones encoded and hashed without viem's hex round trips: eip1559Encoding.ts) and raw
 * hashes. Other typed data, messages and EIP-7702 authorizations are viem's `privateKeyToAccount`,
 * unchanged.
 *
 * Both sign deterministically (RFC 6979) and low-s, so the signatures are byte for byte viem's (unless
 * viem's `setSignEntropy` was called: then viem's are randomised, these stay deterministic, both
 * valid); property tests hold them to it.
 */
import { signRecoverable } from "tiny-secp256k1";
import {
  type Hex,
  hexToBytes,
  keccak256,
  type LocalAccount,
  type SerializeTransactionFn,
  serializeSignature,
  serializeTransaction,
  type TransactionSerializable,
} from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { keccak256Bytes } from "../../protocol/fastKeccak.ts";
import type { TokenDomain } from "./eip712Types.ts";
import { asPlainEip1559, encodeEip1559 } from "./eip1559Encoding.ts";
import { type TransferAuthorizationFields, transferAuthorizationDigest } from "./recoverTransferSigner.ts";

const TRANSFER_FIELDS = [
  "from:address",
  "to:address",
  "value:uint256",
  "validAfter:uint256",
  "validBefore:uint256",
  "nonce:bytes32",
];
const DOMAIN_KEYS = ["chainId", "name", "verifyingContract", "version"];

type TypedDataInput = { primaryType?: unknown; types?: unknown; domain?: unknown; message?: unknown };

/**
 * The digest when `parameters` are a plain EIP-3009 transfer in a {name, version, chainId, contract}
 * domain, else `undefined` (viem signs those). Exported for its test.
 */
export function transferDigestOf(parameters: TypedDataInput): Uint8Array | undefined {
  if (parameters.primaryType !== "TransferWithAuthorization") return undefined;
  const types = parameters.types as Record<string, readonly { name: string; type: string }[]> | undefined;
  if (typeof types !== "object" || types === null) return undefined;
  const typeNames = Object.keys(types).filter((name) => name !== "EIP712Domain");
  const fields = types.TransferWithAuthorization;
  if (typeNames.length !== 1 || fields === undefined) return undefined;
  if (fields.map((f) => `${f.name}:${f.type}`).join() !== TRANSFER_FIELDS.join()) return undefined;
  const domain = parameters.domain as Record<string, unknown> | undefined;
  if (domain === undefined || Object.keys(domain).sort().join() !== DOMAIN_KEYS.join()) return undefined;
  const chainId = domain.chainId;
  if (typeof domain.name !== "string" || typeof domain.version !== "string") return undefined;
  if (typeof chainId !== "number" && typeof chainId !== "bigint") return undefined;
  if (!Number.isSafeInteger(Number(chainId)) || Number(chainId) < 0) return undefined;
  try {
    return transferAuthorizationDigest(
      { ...domain, chainId: Number(chainId) } as TokenDomain,
      parameters.message as unknown as TransferAuthorizationFields,
    );
  } catch {
    // Not what the type says: viem's signTypedData explains it.
    return undefined;
  }
}

/** A hash signed by libsecp256k1, in viem's signature shape (RFC 6979, low-s, as viem's `sign`). */
function signHash(hash: Uint8Array, secret: Uint8Array) {
  const { signature, recoveryId } = signRecoverable(hash, secret);
  const hex = Buffer.from(signature).toString("hex");
  return {
    r: `0x${hex.slice(0, 64)}` as Hex,
    s: `0x${hex.slice(64)}` as Hex,
    v: recoveryId === 1 ? 28n : 27n,
    yParity: recoveryId,
  };
}

/**
 * `privateKeyToAccount(privateKey)` with its signatures of hashes, transactions and EIP-3009 transfers
 * made by libsecp256k1 (a facilitator's gas account signs a transaction per batch; a payer, a transfer
 * per payment). Pass it wherever an account goes (`createPayer({ account: privateKeyAccount(key) })`,
 * `createFacilitator({ gasAccount: privateKeyAccount(key) })`).
 */
export function privateKeyAccount(privateKey: Hex): LocalAccount<"privateKey"> {
  const account = privateKeyToAccount(privateKey);
  const secret = hexToBytes(privateKey);
  return {
    ...account,
    async sign({ hash }) {
      return serializeSignature(signHash(hexToBytes(hash), secret));
    },
    async signTransaction(transaction, options) {
      // The gas key's plain EIP-1559 transactions: encoded once into bytes, hashed by fastKeccak.ts.
      const plain = options?.serializer === undefined ? asPlainEip1559(transaction) : undefined;
      if (plain !== undefined) {
        const signature = signHash(keccak256Bytes(encodeEip1559(plain)), secret);
        return `0x${encodeEip1559(plain, signature).toString("hex")}` as never;
      }
      const serializer = (options?.serializer ??
        serializeTransaction) as SerializeTransactionFn<TransactionSerializable>;
      // As viem: a blob transaction is signed without its sidecars.
      const signable =
        transaction.type === "eip4844" ? { ...transaction, sidecars: false as const } : transaction;
      const hash = keccak256(await serializer(signable as TransactionSerializable), "bytes");
      return (await serializer(transaction as TransactionSerializable, signHash(hash, secret))) as never;
    },
    async signTypedData(parameters) {
      const digest = transferDigestOf(parameters as TypedDataInput);
      if (digest === undefined) return account.signTypedData(parameters);
      const { signature, recoveryId } = signRecoverable(digest, secret);
      return `0x${Buffer.from(signature).toString("hex")}${(27 + recoveryId).toString(16)}`;
    },
  };
}
