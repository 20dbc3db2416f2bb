import { type Address, concat, getContractAddress, type Hex, keccak256, stringToHex } from "viem";

/**
 * The deterministic-deployment proxy (github.com/Arachnid/deterministic-deployment-proxy): called with
 * `salt (32 bytes) ++ initcode`, it runs CREATE2 and returns the new address. It sits at this address on
 * Base, Base Sepolia, anvil and most EVM chains, put there by one pre-signed transaction that needs no
 * chain id (EIP-155 replay protection off), so the same initcode lands at the same address everywhere.
 */
export const deterministicDeployer = "0x4e59b44847b379578588920ca78fbf26c0b4956c" as const satisfies Address;

/**
 * The salt Tollgate's contracts are deployed with: keccak256("tollgate"). Fixed, so that each contract's
 * address depends on its code alone and is the same on every chain.
 */
export const tollgateSalt: Hex = keccak256(stringToHex("tollgate"));

export type DeterministicAddressParameters = {
  /** The contract's creation code with its constructor arguments appended. */
  initcode: Hex;
  /** 32 bytes; default `tollgateSalt`. */
  salt?: Hex | undefined;
};

/**
 * Where the proxy puts `initcode`: keccak256(0xff ++ proxy ++ salt ++ keccak256(initcode))[12:]
 * (EIP-1014). Computed, nothing is read from a chain.
 */
export function deterministicAddress({
  initcode,
  salt = tollgateSalt,
}: DeterministicAddressParameters): Address {
  return getContractAddress({ opcode: "CREATE2", from: deterministicDeployer, salt, bytecode: initcode });
}

/** The proxy's calldata for `initcode`: the salt, then the initcode. */
export function deterministicCalldata({
  initcode,
  salt = tollgateSalt,
}: DeterministicAddressParameters): Hex {
  return concat([salt, initcode]);
}
