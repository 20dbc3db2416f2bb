/**
 * `tollgate deploy` as its own process against anvil devnets, the way an operator runs it: addresses,
 * idempotence, dry runs, keys kept out of the output, the keystore, refusals, and the facilitator's
 * configuration read from the file it writes.
 */
import { createCipheriv, scryptSync } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { concat, createPublicClient, createTestClient, http, keccak256 } from "viem";
import { privateKeyToAddress } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../test/support/runCli.ts";
import { deterministicAddress } from "../chain/actions/deploy/deterministicAddress.ts";
import { batchSettlerBytecode } from "../chain/contracts/artifacts/BatchSettler.ts";
import { subscriptionManagerBytecode } from "../chain/contracts/artifacts/SubscriptionManager.ts";
import { tollgateChannelsBytecode } from "../chain/contracts/artifacts/TollgateChannels.ts";
import { deploymentFilePath, readDeploymentFile } from "../chain/deploymentFile.ts";
import { type Anvil, startAnvil } from "../chain/startAnvil.ts";
import { devnetPrivateKey } from "../chain/startDevnet.ts";
import { loadFacilitatorConfig } from "../facilitator/facilitatorConfig.ts";

const deployerKey = devnetPrivateKey(0);
const deployer = privateKeyToAddress(deployerKey);
const predicted = {
  batchSettler: deterministicAddress({ initcode: batchSettlerBytecode }),
  subscriptionManager: deterministicAddress({ initcode: subscriptionManagerBytecode }),
  channels: deterministicAddress({ initcode: tollgateChannelsBytecode }),
};

/** A keystore of `key` under `password`, as geth writes one (scrypt, r = 8). */
function keystoreOf(key: `0x${string}`, password: string): string {
  const salt = Buffer.alloc(32, 3);
  const iv = Buffer.alloc(16, 5);
  const derived = scryptSync(password, salt, 32, { N: 1024, r: 8, p: 1 });
  const cipher = createCipheriv("aes-128-ctr", derived.subarray(0, 16), iv);
  const ciphertext = Buffer.concat([cipher.update(Buffer.from(key.slice(2), "hex")), cipher.final()]);
  return JSON.stringify({
    version: 3,
    crypto: {
      cipher: "aes-128-ctr",
      cipherparams: { iv: iv.toString("hex") },
      ciphertext: ciphertext.toString("hex"),
      kdf: "scrypt",
      kdfparams: { dklen: 32, n: 1024, r: 8, p: 1, salt: salt.toString("hex") },
      mac: keccak256(concat([derived.subarray(16, 32), ciphertext])).slice(2),
    },
  });
}

// Each CLI run is a Node process with the TypeScript loader: several seconds on a loaded machine.
describe("tollgate deploy", { timeout: 240_000 }, () => {
  const home = mkdtempSync(join(tmpdir(), "tollgate-deploy-"));
  const dir = join(home, "tollgate");
  let anvil: Anvil;
  let client: ReturnType<typeof createPublicClient>;
  const nonce = () => client.getTransactionCount({ address: deployer });
  const deploy = (args: string[], env: Record<string, string> = {}) =>
    runCli(["deploy", "--rpc-url", anvil.rpcUrl, "--dir", dir, ...args], { env, timeoutMs: 180_000 });

  beforeAll(async () => {
    anvil = await startAnvil({ accounts: 3 });
    client = createPublicClient({ transport: http(anvil.rpcUrl) });
  });
  afterAll(async () => {
    await anvil?.stop();
    rmSync(home, { recursive: true, force: true });
  });

  it("in a dry run sends nothing and prints each contract's address, gas and cost, and the total", async () => {
    const before = await nonce();
    const result = await deploy(["--dry-run", "--test-token"], { TOLLGATE_DEPLOYER_KEY: deployerKey });
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    for (const [contract, address] of Object.entries(predicted)) {
      expect(result.stdout).toMatch(
        new RegExp(`${contract}\\s+${address}\\s+would be deployed: \\d+ gas, [0-9.]+ ETH`),
      );
    }
    expect(result.stdout).toMatch(/total: \d+ gas, [0-9.]+ ETH/);
    expect(result.stdout).toContain(`estimated from ${deployer}`);
    expect(result.stdout).not.toContain(deployerKey.slice(2));
    expect(await nonce()).toBe(before);
    expect(await client.getCode({ address: predicted.batchSettler })).toBeUndefined();
  });

  it("refuses a key on the command line without echoing it", async () => {
    const result = await deploy(["--private-key", deployerKey]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--private-key is refused");
    expect(result.stdout + result.stderr).not.toContain(deployerKey.slice(2));
    const joined = await deploy([`--private-key=${deployerKey}`]);
    expect(joined.code).toBe(2);
    expect(joined.stdout + joined.stderr).not.toContain(deployerKey.slice(2));
  });

  it("deploys at the predicted addresses, writes the deployment file, and never prints the key", async () => {
    const result = await deploy(["--test-token"], { TOLLGATE_DEPLOYER_KEY: deployerKey });
    expect(result.code).toBe(0);
    expect(result.stdout + result.stderr).not.toContain(deployerKey.slice(2));
    expect(result.stdout).toContain("deployed 3 contracts on eip155:31337");
    const file = readDeploymentFile(deploymentFilePath(dir, 31337))!;
    expect(file).toMatchObject({
      version: 1,
      network: "eip155:31337",
      chainId: 31337,
      contracts: predicted,
      deployer,
    });
    expect(file.token).toMatchObject({
      name: "USD Coin",
      version: "2",
      symbol: "USDC",
      decimals: 6,
      kind: "test",
    });
    expect(file.transactions.map((t) => t.contract)).toEqual([
      "batchSettler",
      "subscriptionManager",
      "channels",
    ]);
    expect(JSON.stringify(file)).not.toContain(anvil.rpcUrl);
    for (const [contract, address] of Object.entries(predicted)) {
      const code = await client.getCode({ address });
      expect(file.codeHashes[contract as keyof typeof predicted]).toBe(keccak256(code!));
    }
  });

  it("run again, finds everything deployed and sends nothing, also with the key from a keystore", async () => {
    const before = await nonce();
    const keystore = join(home, "deployer.json");
    writeFileSync(keystore, keystoreOf(deployerKey, "correct horse"));
    const result = await deploy(["--test-token", "--keystore", keystore], {
      TOLLGATE_KEYSTORE_PASSWORD: "correct horse",
    });
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("nothing to deploy");
    expect(result.stdout.match(/already deployed/g)).toHaveLength(3);
    expect(await nonce()).toBe(before);

    const wrong = await deploy(["--test-token", "--keystore", keystore], {
      TOLLGATE_KEYSTORE_PASSWORD: "wrong",
    });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain("wrong keystore password");
    expect(wrong.stdout + wrong.stderr).not.toContain("correct horse");
  });

  it("gives the facilitator the token and contracts of the file it wrote", () => {
    const config = loadFacilitatorConfig({
      TOLLGATE_DIR: dir,
      TOLLGATE_NETWORK: "eip155:31337",
      TOLLGATE_RPC_URL: anvil.rpcUrl,
      TOLLGATE_GAS_KEY: devnetPrivateKey(2),
      TOLLGATE_PROOF_KEYS: `0x${"11".repeat(32)}`,
    });
    const file = readDeploymentFile(deploymentFilePath(dir, 31337))!;
    expect(config.batchSettler).toBe(predicted.batchSettler);
    expect(config.subscriptionManager).toBe(predicted.subscriptionManager);
    expect(config.channels).toBe(predicted.channels);
    expect(config.token).toMatchObject({ address: file.token.address, name: "USD Coin", version: "2" });
  });

  it("refuses an address that holds someone else's code, sending nothing", async () => {
    await createTestClient({ mode: "anvil", transport: http(anvil.rpcUrl) }).setCode({
      address: predicted.channels,
      bytecode: "0x6001600055",
    });
    const before = await nonce();
    const result = await deploy(["--test-token"], { TOLLGATE_DEPLOYER_KEY: deployerKey });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`${predicted.channels} holds other code than expected`);
    expect(await nonce()).toBe(before);
  });

  it("never prints an RPC URL it could not reach (it may carry an API key)", async () => {
    const result = await runCli(
      ["deploy", "--rpc-url", "http://127.0.0.1:9/v2/apikey0123456789", "--dry-run"],
      {
        env: { TOLLGATE_DIR: dir },
      },
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("ChainUnavailable");
    expect(result.stdout + result.stderr).not.toContain("apikey0123456789");
  });

  it("refuses a --network that is not the RPC's chain", async () => {
    const result = await deploy(["--dry-run", "--test-token", "--network", "eip155:84532"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("the RPC serves chain 31337");
  });
});

describe("tollgate deploy on chain 84532", { timeout: 240_000 }, () => {
  let anvil: Anvil;
  beforeAll(async () => {
    anvil = await startAnvil({ accounts: 1, chainId: 84532 });
  });
  afterAll(() => anvil?.stop());

  it("refuses a test token anywhere but a devnet, before sending anything", async () => {
    const result = await runCli(["deploy", "--rpc-url", anvil.rpcUrl, "--test-token"], {
      env: {
        TOLLGATE_DEPLOYER_KEY: deployerKey,
        TOLLGATE_DIR: mkdtempSync(join(tmpdir(), "tollgate-deploy-")),
      },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("--test-token is refused on chain 84532");
    const client = createPublicClient({ transport: http(anvil.rpcUrl) });
    expect(await client.getTransactionCount({ address: deployer })).toBe(0);
  });

  it("reads Base Sepolia's USDC at its address, and says so when it is not there", async () => {
    const result = await runCli(["deploy", "--rpc-url", anvil.rpcUrl, "--dry-run"], {
      env: { TOLLGATE_DIR: mkdtempSync(join(tmpdir(), "tollgate-deploy-")) },
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("0x036CbD53842c5426634e7929541eC2318f3dCF7e has no code");
  });
});
