/**
 * EIP-1559 transactions as the facilitator's gas key signs them (no access list, no blobs, no
 * authorizations), RLP-encoded straight into bytes and hashed with js-sha3 (protocol/fastKeccak.ts).
 *
 * Why: viem serializes through hex strings twice per signature (once to hash, once with the signature)
 * and hashes with its JavaScript keccak; for a settlement batch of 100 payments (~33 KB of calldata)
 * that was ~12 ms of the facilitator's thread per transaction on a 2-core machine (~4.8 ms here), and
 * the outbox hashed the signed bytes once more (~8 ms; ~1.3 ms with `transactionHashOf`). Here one
 * encoding of the fields serves both the signing hash and the signed transaction. The output is byte
 * for byte viem's `serializeTransaction` (property tests compare them); anything outside the plain
 * shape is left to viem.
 */
import { type Address, type Hex, isAddress } from "viem";
import { keccak256Hex } from "../../protocol/fastKeccak.ts";

/** The fields of a plain EIP-1559 transaction: viem's `TransactionSerializableEIP1559` without extras. */
export type PlainEip1559 = {
  type: "eip1559";
  chainId: number;
  nonce: number;
  to: Address;
  value?: bigint | undefined;
  data?: Hex | undefined;
  gas: bigint;
  maxFeePerGas: bigint;
  maxPriorityFeePerGas: bigint;
};

/** The signature as viem's `sign` gives it (r and s as 32-byte hex, `yParity` 0 or 1). */
export type EcdsaSignature = { r: Hex; s: Hex; yParity: number };

const PLAIN_KEYS = new Set([
  "type",
  "chainId",
  "nonce",
  "to",
  "value",
  "data",
  "gas",
  "maxFeePerGas",
  "maxPriorityFeePerGas",
  // Present and empty only: checked below.
  "accessList",
]);

/**
 * `transaction` narrowed to the plain shape, or `undefined` when viem should serialize it: another
 * type, an access list, a field this encoder does not write, a value of an unexpected kind.
 */
export function asPlainEip1559(transaction: object): PlainEip1559 | undefined {
  const t = transaction as Record<string, unknown>;
  if (t.type !== "eip1559") return undefined;
  for (const key of Object.keys(t)) {
    if (!PLAIN_KEYS.has(key) && t[key] !== undefined) return undefined;
  }
  if (t.accessList !== undefined && !(Array.isArray(t.accessList) && t.accessList.length === 0)) {
    return undefined;
  }
  if (!Number.isSafeInteger(t.chainId) || (t.chainId as number) <= 0) return undefined;
  if (!Number.isSafeInteger(t.nonce) || (t.nonce as number) < 0) return undefined;
  // viem's own check (checksum included, cached), so a bad address is refused as viem refuses it.
  if (typeof t.to !== "string" || !isAddress(t.to)) return undefined;
  if (t.data !== undefined && (typeof t.data !== "string" || !HEX.test(t.data))) return undefined;
  for (const key of ["gas", "maxFeePerGas", "maxPriorityFeePerGas"] as const) {
    if (!isUint256(t[key])) return undefined;
  }
  if (t.value !== undefined && !isUint256(t.value)) return undefined;
  // viem refuses a tip above the fee cap (TipAboveFeeCapError): let it.
  if ((t.maxPriorityFeePerGas as bigint) > (t.maxFeePerGas as bigint)) return undefined;
  return t as PlainEip1559;
}

const HEX = /^0x(?:[0-9a-fA-F]{2})*$/;
const isUint256 = (v: unknown) => typeof v === "bigint" && v >= 0n && v < 1n << 256n;

/**
 * `0x02 || rlp([chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas, to, value, data, [],
 * (yParity, r, s)])`: the signing payload without `signature`, the signed transaction with it.
 */
export function encodeEip1559(transaction: PlainEip1559, signature?: EcdsaSignature): Buffer {
  const items: Buffer[] = [
    // viem writes the chain id as `numberToHex`, so a zero would be one zero byte (never a chain id).
    uintBytes(BigInt(transaction.chainId)),
    uintBytes(BigInt(transaction.nonce)),
    uintBytes(transaction.maxPriorityFeePerGas),
    uintBytes(transaction.maxFeePerGas),
    uintBytes(transaction.gas),
    hexBytes(transaction.to),
    uintBytes(transaction.value ?? 0n),
    hexBytes(transaction.data ?? "0x"),
  ];
  const encoded: Buffer[] = items.map(rlpString);
  encoded.push(EMPTY_LIST);
  if (signature !== undefined) {
    encoded.push(rlpString(uintBytes(BigInt(signature.yParity))));
    encoded.push(rlpString(uintBytes(BigInt(signature.r))));
    encoded.push(rlpString(uintBytes(BigInt(signature.s))));
  }
  const payload = Buffer.concat(encoded);
  return Buffer.concat([TYPE_PREFIX, lengthPrefix(payload.length, 0xc0), payload]);
}

/** A signed transaction's hash from its serialized hex, equal to viem's `keccak256(raw)`. */
export function transactionHashOf(raw: Hex): Hex {
  return keccak256Hex(Buffer.from(raw.slice(2), "hex"));
}

const TYPE_PREFIX = Buffer.from([0x02]);
const EMPTY_LIST = Buffer.from([0xc0]);
const NO_BYTES = Buffer.alloc(0);

/** Minimal big-endian bytes of `value` (none for zero), as RLP writes integers. */
function uintBytes(value: bigint): Buffer {
  if (value === 0n) return NO_BYTES;
  const hex = value.toString(16);
  return Buffer.from(hex.length % 2 === 0 ? hex : `0${hex}`, "hex");
}

function hexBytes(hex: string): Buffer {
  return Buffer.from(hex.slice(2), "hex");
}

function rlpString(bytes: Buffer): Buffer {
  if (bytes.length === 1 && (bytes[0] as number) < 0x80) return bytes;
  return Buffer.concat([lengthPrefix(bytes.length, 0x80), bytes]);
}

/** The RLP header for a string (`offset` 0x80) or list (0xc0) of `length` bytes. */
function lengthPrefix(length: number, offset: number): Buffer {
  if (length <= 55) return Buffer.from([offset + length]);
  const lengthBytes = uintBytes(BigInt(length));
  return Buffer.concat([Buffer.from([offset + 55 + lengthBytes.length]), lengthBytes]);
}
