/**
 * The facilitator's settings from a deployment file (`tollgate deploy`, src/chain/deploymentFile.ts):
 * the token with its EIP-712 domain and the three contract addresses, as defaults for the variables
 * that say them. A variable that is set wins over the file.
 *
 * Which file: the one TOLLGATE_DEPLOYMENT names, else `<TOLLGATE_DIR>/deployment-<chain id>.json` for
 * the chain of TOLLGATE_NETWORK. A file for another network than TOLLGATE_NETWORK is refused, never
 * half-used: its addresses would be another chain's.
 */
import { deploymentFilePath, readDeploymentFile } from "../chain/deploymentFile.ts";
import { sameAddress } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import { chainIdOf, NetworkSchema } from "../protocol/network.ts";

/** `environment` with the deployment file's values filled in where their variables are unset. */
export function withDeploymentDefaults(
  environment: Record<string, string | undefined>,
): Record<string, string | undefined> {
  const named = nonEmpty(environment.TOLLGATE_DEPLOYMENT);
  const networkText = nonEmpty(environment.TOLLGATE_NETWORK);
  // A malformed TOLLGATE_NETWORK is reported by the configuration's own parsing.
  const network = networkText === undefined ? undefined : NetworkSchema.safeParse(networkText).data;
  let file: string;
  if (named !== undefined) {
    file = named;
  } else if (network !== undefined) {
    file = deploymentFilePath(nonEmpty(environment.TOLLGATE_DIR) ?? ".tollgate", chainIdOf(network));
  } else {
    return environment;
  }
  const deployment = readDeploymentFile(file);
  if (deployment === undefined) {
    if (named === undefined) return environment;
    throw new TollgateError("InvalidRequest", `TOLLGATE_DEPLOYMENT names ${named}, which does not exist`, {
      details: { variable: "TOLLGATE_DEPLOYMENT" },
    });
  }
  if (network !== undefined && deployment.network !== network) {
    throw new TollgateError(
      "InvalidRequest",
      `${file} describes a deployment on ${deployment.network}, but TOLLGATE_NETWORK is ${network}: its addresses are another chain's. Deploy on ${network} (\`tollgate deploy\`), or point TOLLGATE_DEPLOYMENT at that network's file`,
      { details: { file, deployment: deployment.network, network } },
    );
  }
  const env = { ...environment };
  const fill = (variable: string, value: string) => {
    if (nonEmpty(env[variable]) === undefined) env[variable] = value;
  };
  fill("TOLLGATE_NETWORK", deployment.network);
  // The file's EIP-712 domain belongs to the file's token: it is not applied to another token set by hand.
  const token = nonEmpty(env.TOLLGATE_TOKEN);
  if (token === undefined || sameAddress(token, deployment.token.address)) {
    fill("TOLLGATE_TOKEN", deployment.token.address);
    fill("TOLLGATE_TOKEN_NAME", deployment.token.name);
    fill("TOLLGATE_TOKEN_VERSION", deployment.token.version);
  }
  fill("TOLLGATE_BATCH_SETTLER", deployment.contracts.batchSettler);
  fill("TOLLGATE_SUBSCRIPTION_MANAGER", deployment.contracts.subscriptionManager);
  fill("TOLLGATE_CHANNELS", deployment.contracts.channels);
  return env;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}
