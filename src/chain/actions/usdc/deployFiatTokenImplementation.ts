import { type Address, getAddress, type Hash, type Hex } from "viem";
import { deployContract, waitForTransactionReceipt } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import {
  fiatTokenV2_2Abi,
  fiatTokenV2_2Bytecode,
  fiatTokenV2_2LinkReferences,
} from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import {
  signatureCheckerAbi,
  signatureCheckerBytecode,
} from "../../contracts/circle-usdc/SignatureChecker.ts";

/** Writes `library` into FiatToken v2.2's creation code at every place solc left for SignatureChecker. */
export function linkFiatTokenBytecode(library: Address): Hex {
  const address = library.slice(2).toLowerCase();
  let code = fiatTokenV2_2Bytecode.slice(2);
  for (const { start, length } of fiatTokenV2_2LinkReferences) {
    code = code.slice(0, start * 2) + address + code.slice((start + length) * 2);
  }
  if (code.includes("__")) throw new Error("FiatToken v2.2 bytecode has an unlinked library");
  return `0x${code}`;
}

/** Waits for a deployment and returns the contract's address; throws if it reverted. */
export async function deployedAddress(client: WriteClient, hash: Hash): Promise<Address> {
  const receipt = await waitForTransactionReceipt(client, { hash });
  if (receipt.status !== "success" || receipt.contractAddress == null) {
    throw new Error(`deployment transaction ${hash} failed`);
  }
  return getAddress(receipt.contractAddress);
}

/**
 * Deploys Circle's SignatureChecker library and the FiatToken v2.2 implementation linked to it. The
 * implementation is not a usable token by itself: a FiatTokenProxy must point at it.
 *
 * @example
 * const { implementation } = await deployFiatTokenImplementation(walletClient);
 */
export async function deployFiatTokenImplementation(
  client: WriteClient,
): Promise<{ implementation: Address; signatureChecker: Address }> {
  const signatureChecker = await deployedAddress(
    client,
    await deployContract(client, { abi: signatureCheckerAbi, bytecode: signatureCheckerBytecode }),
  );
  const implementation = await deployedAddress(
    client,
    await deployContract(client, {
      abi: fiatTokenV2_2Abi,
      bytecode: linkFiatTokenBytecode(signatureChecker),
    }),
  );
  return { implementation, signatureChecker };
}
