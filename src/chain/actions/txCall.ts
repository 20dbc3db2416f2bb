/**
 * A contract call ready to be signed by a key that is not a viem wallet client's: the facilitator's
 * transaction outbox signs these. The `*Call` actions (`settleCall`, `collectManyCall`, …) build them,
 * viem style, from typed parameters; `contractCall` builds one from any ABI.
 */
import {
  type Abi,
  type Address,
  type ContractFunctionArgs,
  type ContractFunctionName,
  encodeFunctionData,
  type Hex,
} from "viem";

/** A call's destination, calldata and gas limit (and value, 0 when absent). */
export type TxCall = {
  to: Address;
  data: Hex;
  /** Gas limit: a formula or an estimate with headroom; the outbox never estimates. */
  gas: bigint;
  value?: bigint | undefined;
};

export type ContractCallParameters<
  abi extends Abi,
  functionName extends ContractFunctionName<abi, "nonpayable" | "payable">,
> = {
  address: Address;
  abi: abi;
  functionName: functionName;
  args: ContractFunctionArgs<abi, "nonpayable" | "payable", functionName>;
  gas: bigint;
  value?: bigint | undefined;
};

/**
 * Encodes a typed contract call into a `TxCall`.
 * @example
 * const call = contractCall({ address: manager, abi: subscriptionManagerAbi, functionName: "collectMany",
 *   args: [[1n, 2n]], gas: 300_000n });
 */
export function contractCall<
  const abi extends Abi,
  functionName extends ContractFunctionName<abi, "nonpayable" | "payable">,
>(parameters: ContractCallParameters<abi, functionName>): TxCall {
  const data = encodeFunctionData({
    abi: parameters.abi,
    functionName: parameters.functionName,
    args: parameters.args,
  } as never);
  return {
    to: parameters.address,
    data,
    gas: parameters.gas,
    ...(parameters.value === undefined ? {} : { value: parameters.value }),
  };
}
