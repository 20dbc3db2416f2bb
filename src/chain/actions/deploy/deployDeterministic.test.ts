import { keccak256 } from "viem";
import { getTransactionCount } from "viem/actions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isTollgateError } from "../../../protocol/errors.ts";
import { batchSettlerBytecode } from "../../contracts/artifacts/BatchSettler.ts";
import { subscriptionManagerBytecode } from "../../contracts/artifacts/SubscriptionManager.ts";
import { startAnvil } from "../../startAnvil.ts";
import { connectDevnet } from "../../startDevnet.ts";
import { deployDeterministic } from "./deployDeterministic.ts";
import { deterministicAddress, deterministicDeployer } from "./deterministicAddress.ts";
import { readDeterministicDeployment } from "./readDeterministicDeployment.ts";

describe("deployDeterministic", () => {
  let devnet: ReturnType<typeof connectDevnet>;
  beforeAll(async () => {
    const anvil = await startAnvil({ accounts: 2 });
    devnet = connectDevnet(anvil.rpcUrl, 2, () => anvil.stop());
  });
  afterAll(() => devnet?.stop());

  it("deploys at the predicted address, then finds it there and sends nothing", async () => {
    const client = devnet.walletClient(devnet.deployer);
    // SubscriptionManager keeps address(this) in its code (EIP712 immutables): the expected code must be
    // simulated at the real address for the hashes to agree.
    const initcode = subscriptionManagerBytecode;
    const address = deterministicAddress({ initcode });
    expect(await readDeterministicDeployment(devnet.publicClient, { initcode })).toMatchObject({
      address,
      status: "absent",
      codeHash: undefined,
    });
    const first = await deployDeterministic(client, { initcode });
    expect(first.address).toBe(address);
    expect(first.transactionHash).toBeDefined();
    const code = await devnet.publicClient.getCode({ address });
    expect(first.codeHash).toBe(keccak256(code!));

    const nonce = await getTransactionCount(devnet.publicClient, { address: devnet.deployer.address });
    const second = await deployDeterministic(client, { initcode });
    expect(second).toEqual({ address, codeHash: first.codeHash, transactionHash: undefined });
    expect(await getTransactionCount(devnet.publicClient, { address: devnet.deployer.address })).toBe(nonce);
  });

  it("refuses an address that holds other code, without sending anything", async () => {
    const initcode = batchSettlerBytecode;
    const address = deterministicAddress({ initcode });
    await devnet.testClient.setCode({ address, bytecode: "0x6001600055" });
    const deployment = await readDeterministicDeployment(devnet.publicClient, { initcode });
    expect(deployment).toMatchObject({ status: "foreign", codeHash: keccak256("0x6001600055") });
    const nonce = await getTransactionCount(devnet.publicClient, { address: devnet.deployer.address });
    const error = await deployDeterministic(devnet.walletClient(devnet.deployer), { initcode }).catch(
      (e) => e,
    );
    expect(isTollgateError(error, "InvalidRequest")).toBe(true);
    expect(error.message).toContain("other code");
    expect(await getTransactionCount(devnet.publicClient, { address: devnet.deployer.address })).toBe(nonce);
  });

  it("says so when the chain has no deterministic-deployment proxy", async () => {
    await devnet.testClient.setCode({ address: deterministicDeployer, bytecode: "0x" });
    const error = await readDeterministicDeployment(devnet.publicClient, {
      initcode: batchSettlerBytecode,
    }).catch((e) => e);
    expect(isTollgateError(error, "UnsupportedNetwork")).toBe(true);
    expect(error.message).toContain("Base Sepolia");
  });
});
