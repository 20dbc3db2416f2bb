import type { Address, Hex } from "viem";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import { type RelayedCall, relayedCall } from "../relayedCall.ts";
import { signatureArgs } from "./signatureArgs.ts";

/** An owner-signed EIP-2612 `permit`, relayed by someone else (its v, r, s split from `signature`). */
export function permitRelay(p: {
  token: Address;
  owner: Address;
  spender: Address;
  value: bigint;
  deadline: bigint;
  signature: Hex;
}): RelayedCall {
  const { v, r, s } = signatureArgs(p.signature);
  return relayedCall({
    address: p.token,
    abi: fiatTokenV2_2Abi,
    functionName: "permit",
    args: [p.owner, p.spender, p.value, p.deadline, v, r, s],
  });
}
