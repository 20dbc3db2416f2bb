import { getTransactionCount } from "viem/actions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAnvil } from "../../startAnvil.ts";
import { connectDevnet } from "../../startDevnet.ts";
import { deployDeterministic } from "./deployDeterministic.ts";
import { deterministicAddress } from "./deterministicAddress.ts";
import { planTollgateDeployment, tollgateContractCode } from "./planTollgateDeployment.ts";

describe("planTollgateDeployment", () => {
  let devnet: ReturnType<typeof connectDevnet>;
  beforeAll(async () => {
    const anvil = await startAnvil({ accounts: 1 });
    devnet = connectDevnet(anvil.rpcUrl, 1, () => anvil.stop());
  });
  afterAll(() => devnet?.stop());

  it("estimates each absent contract from an account without ETH, and sends nothing", async () => {
    const empty = "0x000000000000000000000000000000000000dEaD" as const;
    const plan = await planTollgateDeployment(devnet.publicClient, { from: empty });
    expect(plan.map((p) => p.contract)).toEqual(["batchSettler", "subscriptionManager", "channels"]);
    for (const step of plan) {
      expect(step.address).toBe(deterministicAddress({ initcode: tollgateContractCode[step.contract] }));
      expect(step.status).toBe("absent");
      expect(step.gas).toBeGreaterThan(100_000n);
    }
    expect(await getTransactionCount(devnet.publicClient, { address: devnet.deployer.address })).toBe(0);
  });

  it("marks a contract already deployed, with no estimate for it", async () => {
    await deployDeterministic(devnet.walletClient(devnet.deployer), {
      initcode: tollgateContractCode.channels,
    });
    const plan = await planTollgateDeployment(devnet.publicClient, { from: devnet.deployer.address });
    expect(plan.map((p) => [p.contract, p.status, p.gas === undefined])).toEqual([
      ["batchSettler", "absent", false],
      ["subscriptionManager", "absent", false],
      ["channels", "deployed", true],
    ]);
  });
});
