import { type Address, type Client, type Hex, keccak256, size } from "viem";
import { getCode } from "viem/actions";
import { TollgateError } from "../../../protocol/errors.ts";
import { deterministicAddress, deterministicDeployer, tollgateSalt } from "./deterministicAddress.ts";
import { simulateDeterministicCode } from "./simulateDeterministicCode.ts";

export type ReadDeterministicDeploymentParameters = {
  initcode: Hex;
  /** Default `tollgateSalt`. */
  salt?: Hex | undefined;
};

export type DeterministicDeployment = {
  address: Address;
  /** keccak256 of the runtime code the initcode deploys there. */
  expectedCodeHash: Hex;
  /**
   * `absent`: nothing at the address yet; `deployed`: the expected code is there; `foreign`: other code
   * is (`codeHash` says whose), which no deployment can replace.
   */
  status: "absent" | "deployed" | "foreign";
  /** keccak256 of the code at the address now; `undefined` when there is none. */
  codeHash: Hex | undefined;
};

/**
 * Where `initcode` lands through the deterministic-deployment proxy, and what is there now. Throws
 * `UnsupportedNetwork` when the chain has no proxy.
 *
 * @example
 * const { address, status } = await readDeterministicDeployment(publicClient, { initcode: batchSettlerBytecode });
 */
export async function readDeterministicDeployment(
  client: Client,
  { initcode, salt = tollgateSalt }: ReadDeterministicDeploymentParameters,
): Promise<DeterministicDeployment> {
  await assertDeterministicDeployer(client);
  const address = deterministicAddress({ initcode, salt });
  const [expected, code] = await Promise.all([
    simulateDeterministicCode(client, { initcode, salt }),
    getCode(client, { address }),
  ]);
  const expectedCodeHash = keccak256(expected);
  if (code === undefined || size(code) === 0) {
    return { address, expectedCodeHash, status: "absent", codeHash: undefined };
  }
  const codeHash = keccak256(code);
  return {
    address,
    expectedCodeHash,
    status: codeHash === expectedCodeHash ? "deployed" : "foreign",
    codeHash,
  };
}

/** Throws `UnsupportedNetwork` unless the deterministic-deployment proxy has code on the client's chain. */
export async function assertDeterministicDeployer(client: Client): Promise<void> {
  const code = await getCode(client, { address: deterministicDeployer });
  if (code !== undefined && size(code) > 0) return;
  throw new TollgateError(
    "UnsupportedNetwork",
    `this chain has no deterministic-deployment proxy at ${deterministicDeployer}: it is the standard one ` +
      "(github.com/Arachnid/deterministic-deployment-proxy), present on Base, Base Sepolia and anvil; on " +
      "another chain anyone can put it there by funding its deployer and sending its pre-signed transaction " +
      "(see that repository), then run this again",
    { details: { address: deterministicDeployer } },
  );
}
