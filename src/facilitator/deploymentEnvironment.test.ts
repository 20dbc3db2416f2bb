import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type DeploymentFile, deploymentFilePath, writeDeploymentFile } from "../chain/deploymentFile.ts";
import { isTollgateError } from "../protocol/errors.ts";
import { withDeploymentDefaults } from "./deploymentEnvironment.ts";
import { loadFacilitatorConfig } from "./facilitatorConfig.ts";

const dir = mkdtempSync(join(tmpdir(), "tollgate-deployment-env-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const deployment: DeploymentFile = {
  version: 1,
  network: "eip155:84532",
  chainId: 84532,
  token: {
    address: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    name: "USDC",
    version: "2",
    symbol: "USDC",
    decimals: 6,
    kind: "network",
  },
  contracts: {
    batchSettler: "0x640BcE5511691812623413Cd0fF4F79487C93c49",
    subscriptionManager: "0x668D9236438801e5Abc9975B7793e13AC424Aa1F",
    channels: "0x0B9E1017E02c5157119618F3A2Af7823Ee1Bd9c1",
  },
  codeHashes: {
    batchSettler: `0x${"01".repeat(32)}`,
    subscriptionManager: `0x${"02".repeat(32)}`,
    channels: `0x${"03".repeat(32)}`,
  },
  salt: `0x${"00".repeat(32)}`,
  deployer: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
  deployedAt: "2026-12-05T01:51:02.620Z",
  transactions: [],
};
writeDeploymentFile(deploymentFilePath(dir, 84532), deployment);

const keys = {
  TOLLGATE_RPC_URL: "http://127.0.0.1:1",
  TOLLGATE_GAS_KEY: `0x${"ab".repeat(32)}`,
  TOLLGATE_PROOF_KEYS: `0x${"11".repeat(32)}`,
};

function errorOf(fn: () => unknown): { code: string; message: string } | undefined {
  try {
    fn();
  } catch (error) {
    return isTollgateError(error) ? error : { code: `not a TollgateError`, message: String(error) };
  }
  return undefined;
}

describe("the facilitator's configuration from a deployment file", () => {
  it("takes the token, its EIP-712 domain and the three contracts from <dir>/deployment-<chain id>.json", () => {
    const config = loadFacilitatorConfig({ ...keys, TOLLGATE_DIR: dir, TOLLGATE_NETWORK: "eip155:84532" });
    expect(config.network).toBe("eip155:84532");
    expect(config.token).toMatchObject({ address: deployment.token.address, name: "USDC", version: "2" });
    expect(config.batchSettler).toBe(deployment.contracts.batchSettler);
    expect(config.subscriptionManager).toBe(deployment.contracts.subscriptionManager);
    expect(config.channels).toBe(deployment.contracts.channels);
  });

  it("lets variables that are set win over the file", () => {
    const config = loadFacilitatorConfig({
      ...keys,
      TOLLGATE_DIR: dir,
      TOLLGATE_NETWORK: "eip155:84532",
      TOLLGATE_BATCH_SETTLER: "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
    });
    expect(config.batchSettler).toBe("0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0");
    expect(config.channels).toBe(deployment.contracts.channels);
  });

  it("does not give another token, set by hand, the file's token's domain", () => {
    const other = "0x1111111111111111111111111111111111111111";
    const env = withDeploymentDefaults({
      TOLLGATE_DIR: dir,
      TOLLGATE_NETWORK: "eip155:84532",
      TOLLGATE_TOKEN: other,
    });
    expect(env.TOLLGATE_TOKEN).toBe(other);
    expect(env.TOLLGATE_TOKEN_NAME).toBeUndefined();
    expect(env.TOLLGATE_BATCH_SETTLER).toBe(deployment.contracts.batchSettler);
  });

  it("reads the file TOLLGATE_DEPLOYMENT names, network included, wherever it is", () => {
    const file = join(dir, "elsewhere.json");
    writeFileSync(file, JSON.stringify(deployment));
    const config = loadFacilitatorConfig({
      ...keys,
      TOLLGATE_DIR: join(dir, "empty"),
      TOLLGATE_DEPLOYMENT: file,
    });
    expect(config.network).toBe("eip155:84532");
    expect(config.batchSettler).toBe(deployment.contracts.batchSettler);
  });

  it("refuses a deployment file of another network than TOLLGATE_NETWORK", () => {
    const file = join(dir, "elsewhere.json");
    const error = errorOf(() =>
      loadFacilitatorConfig({ ...keys, TOLLGATE_DEPLOYMENT: file, TOLLGATE_NETWORK: "eip155:8453" }),
    );
    expect(error?.code).toBe("InvalidRequest");
    expect(error?.message).toContain("eip155:84532");
    expect(error?.message).toContain("eip155:8453");
  });

  it("refuses a TOLLGATE_DEPLOYMENT that does not exist, and a file that is not a deployment", () => {
    expect(
      errorOf(() => withDeploymentDefaults({ TOLLGATE_DEPLOYMENT: join(dir, "missing.json") }))?.message,
    ).toContain("does not exist");
    const bad = join(dir, "bad.json");
    writeFileSync(bad, JSON.stringify({ ...deployment, chainId: 8453 }));
    expect(errorOf(() => withDeploymentDefaults({ TOLLGATE_DEPLOYMENT: bad }))?.message).toContain("chainId");
  });

  it("reads nothing for a network that has no deployment file", () => {
    const environment = { TOLLGATE_DIR: dir, TOLLGATE_NETWORK: "eip155:8453" };
    expect(withDeploymentDefaults(environment)).toBe(environment);
  });
});
