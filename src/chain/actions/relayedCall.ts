/**
 * A call the facilitator relays for a signer (a permit, a subscriber's signed intent): the parameters
 * to simulate it with and its destination and calldata to send. The `*Relay` actions build them from
 * typed parameters, so relaying code names no ABI or function.
 */
import {
  type Abi,
  type Address,
  type ContractFunctionArgs,
  type ContractFunctionName,
  encodeFunctionData,
  type Hex,
} from "viem";

export type RelayedCall = {
  /** For `simulateContract` (add the relayer as `account`). */
  simulation: { address: Address; abi: Abi; functionName: string; args: readonly unknown[] };
  to: Address;
  data: Hex;
};

/** Builds a `RelayedCall` from a typed contract call. */
export function relayedCall<
  abi extends Abi,
  functionName extends ContractFunctionName<abi, "nonpayable" | "payable">,
>(p: {
  address: Address;
  abi: abi;
  functionName: functionName;
  args: ContractFunctionArgs<abi, "nonpayable" | "payable", functionName>;
}): RelayedCall {
  const data = encodeFunctionData({ abi: p.abi, functionName: p.functionName, args: p.args } as never);
  return {
    simulation: {
      address: p.address,
      abi: p.abi,
      functionName: p.functionName,
      args: p.args as readonly unknown[],
    },
    to: p.address,
    data,
  };
}
