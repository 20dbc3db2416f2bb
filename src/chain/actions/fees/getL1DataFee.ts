import { type Address, type Hex, type PublicClient, parseAbi } from "viem";

/**
 * The GasPriceOracle predeploy of OP-stack chains (OP, Base, Base Sepolia, …): it prices the L1 data
 * fee a transaction pays on top of its L2 gas, from the L1 base fee and blob base fee the sequencer
 * last posted.
 */
export const GAS_PRICE_ORACLE: Address = "0x420000000000000000000000000000000000000F";

/** `getL1Fee(bytes)`: present on every version of the oracle (Bedrock, Ecotone, Fjord and later). */
const gasPriceOracleAbi = parseAbi(["function getL1Fee(bytes _data) view returns (uint256)"]);

export type GetL1DataFeeParameters = {
  /** The bytes whose data fee is asked: an unsigned transaction's, or the part of one a caller adds. */
  data: Hex;
  /** The oracle (default the predeploy). */
  oracle?: Address | undefined;
};

/**
 * The L1 data fee, in wei, the oracle charges for `data` now. Since Fjord it estimates the bytes'
 * compressed size (FastLZ) and adds a signed transaction's fixed overhead, so the figure for a part of a
 * transaction is an upper bound of what that part adds. Reverts (and so throws) where no oracle is
 * deployed with code.
 *
 * @example
 * const wei = await getL1DataFee(client, { data: "0x…" });
 */
export function getL1DataFee(
  client: Pick<PublicClient, "readContract">,
  { data, oracle }: GetL1DataFeeParameters,
): Promise<bigint> {
  return client.readContract({
    address: oracle ?? GAS_PRICE_ORACLE,
    abi: gasPriceOracleAbi,
    functionName: "getL1Fee",
    args: [data],
  });
}

/** Whether the chain has a GasPriceOracle (code at the predeploy address): an OP-stack chain. */
export async function hasGasPriceOracle(
  client: Pick<PublicClient, "getCode">,
  oracle: Address = GAS_PRICE_ORACLE,
): Promise<boolean> {
  const code = await client.getCode({ address: oracle });
  return code !== undefined && code !== "0x";
}
