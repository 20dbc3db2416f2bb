import type { Address, Hash, Hex } from "viem";
import { sendTransaction, waitForTransactionReceipt } from "viem/actions";
import { TollgateError } from "../../../protocol/errors.ts";
import type { WriteClient } from "../../clientTypes.ts";
import { deterministicCalldata, deterministicDeployer, tollgateSalt } from "./deterministicAddress.ts";
import { readDeterministicDeployment } from "./readDeterministicDeployment.ts";

export type DeployDeterministicParameters = {
  initcode: Hex;
  /** Default `tollgateSalt`. */
  salt?: Hex | undefined;
  /** Blocks to wait for on the deployment's receipt (default 1). */
  confirmations?: number | undefined;
};

export type DeployDeterministicResult = {
  address: Address;
  codeHash: Hex;
  /** The deployment's transaction; `undefined` when the contract was there already. */
  transactionHash: Hash | undefined;
};

/**
 * Deploys `initcode` through the deterministic-deployment proxy, unless the same code is at its address
 * already (then nothing is sent). Throws `InvalidRequest` when other code holds the address, and when
 * the transaction leaves anything but the expected code there.
 *
 * Idempotent: a crash between sending and the receipt leaves either nothing (run again) or the contract
 * (found on the next run); the proxy's CREATE2 can never put a second copy anywhere.
 *
 * @example
 * const { address } = await deployDeterministic(walletClient, { initcode: batchSettlerBytecode });
 */
export async function deployDeterministic(
  client: WriteClient,
  { initcode, salt = tollgateSalt, confirmations = 1 }: DeployDeterministicParameters,
): Promise<DeployDeterministicResult> {
  const before = await readDeterministicDeployment(client, { initcode, salt });
  assertNotForeign(before);
  if (before.status === "deployed") {
    return { address: before.address, codeHash: before.expectedCodeHash, transactionHash: undefined };
  }
  const hash = await sendTransaction(client, {
    account: client.account,
    chain: client.chain,
    to: deterministicDeployer,
    data: deterministicCalldata({ initcode, salt }),
  });
  const receipt = await waitForTransactionReceipt(client, { hash, confirmations });
  const after = await readDeterministicDeployment(client, { initcode, salt });
  if (receipt.status !== "success" || after.status !== "deployed") {
    assertNotForeign(after);
    throw new TollgateError(
      "InvalidRequest",
      `the deployment of ${before.address} (transaction ${hash}) left no contract there`,
      { details: { address: before.address, transactionHash: hash } },
    );
  }
  return { address: after.address, codeHash: after.expectedCodeHash, transactionHash: hash };
}

/** Throws when other code than `initcode`'s holds the deterministic address. */
export function assertNotForeign(deployment: {
  address: Address;
  status: string;
  codeHash: Hex | undefined;
  expectedCodeHash: Hex;
}): void {
  if (deployment.status !== "foreign") return;
  throw new TollgateError(
    "InvalidRequest",
    `${deployment.address} holds other code than expected (code hash ${deployment.codeHash}, expected ` +
      `${deployment.expectedCodeHash}): not Tollgate's contract, refusing to use it`,
    {
      details: {
        address: deployment.address,
        codeHash: deployment.codeHash,
        expectedCodeHash: deployment.expectedCodeHash,
      },
    },
  );
}
