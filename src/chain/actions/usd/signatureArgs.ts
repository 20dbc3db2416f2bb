import { type Hex, parseSignature } from "viem";

/** Splits a 65-byte signature into the (v, r, s) arguments of the older EIP-3009/EIP-2612 entry points. */
export function signatureArgs(signature: Hex): { v: number; r: Hex; s: Hex } {
  const { r, s, v, yParity } = parseSignature(signature);
  return { v: v === undefined ? yParity + 27 : Number(v), r, s };
}
