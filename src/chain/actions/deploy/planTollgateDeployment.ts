import type { Address, Client, Hex } from "viem";
import { estimateGas } from "viem/actions";
import { batchSettlerBytecode } from "../../contracts/artifacts/BatchSettler.ts";
import { subscriptionManagerBytecode } from "../../contracts/artifacts/SubscriptionManager.ts";
import { tollgateChannelsBytecode } from "../../contracts/artifacts/TollgateChannels.ts";
import { deterministicCalldata, deterministicDeployer, tollgateSalt } from "./deterministicAddress.ts";
import { type DeterministicDeployment, readDeterministicDeployment } from "./readDeterministicDeployment.ts";

/** Tollgate's contracts by their name in a deployment file, with their creation code (none takes constructor arguments). */
export const tollgateContractCode = {
  batchSettler: batchSettlerBytecode,
  subscriptionManager: subscriptionManagerBytecode,
  channels: tollgateChannelsBytecode,
} as const satisfies Record<string, Hex>;

export type TollgateContractName = keyof typeof tollgateContractCode;

export type PlannedDeployment = DeterministicDeployment & {
  contract: TollgateContractName;
  /** The creation code. */
  initcode: Hex;
  /** Estimated gas of the proxy call; only for `absent` contracts, when `from` was given. */
  gas: bigint | undefined;
};

export type PlanTollgateDeploymentParameters = {
  /** The account that would send the deployments (it need not hold any ETH: estimates assume no fee). */
  from?: Address | undefined;
  /** Default `tollgateSalt`. */
  salt?: Hex | undefined;
};

/**
 * What deploying Tollgate's three contracts on the client's chain would do, without sending anything:
 * for each, its deterministic address, whether it is there already (or other code is), and, for those
 * still absent, the gas its proxy call is estimated to use. Throws `UnsupportedNetwork` when the chain has
 * no deterministic-deployment proxy.
 *
 * @example
 * const plan = await planTollgateDeployment(publicClient, { from: deployer });
 */
export async function planTollgateDeployment(
  client: Client,
  { from, salt = tollgateSalt }: PlanTollgateDeploymentParameters = {},
): Promise<PlannedDeployment[]> {
  const plan: PlannedDeployment[] = [];
  for (const [contract, initcode] of Object.entries(tollgateContractCode) as [TollgateContractName, Hex][]) {
    const deployment = await readDeterministicDeployment(client, { initcode, salt });
    const gas =
      deployment.status === "absent" && from !== undefined
        ? await estimateGas(client, {
            account: from,
            to: deterministicDeployer,
            data: deterministicCalldata({ initcode, salt }),
          })
        : undefined;
    plan.push({ ...deployment, contract, initcode, gas });
  }
  return plan;
}
