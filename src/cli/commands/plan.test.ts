import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createPublicClient, createTestClient, createWalletClient, http, zeroHash } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { deployContract, waitForTransactionReceipt } from "viem/actions";
import { baseSepolia } from "viem/chains";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getIsOperator } from "../../chain/actions/subscriptions/getIsOperator.ts";
import { getPlan } from "../../chain/actions/subscriptions/getPlan.ts";
import { placeFiatToken } from "../../chain/actions/usdc/placeFiatToken.ts";
import {
  subscriptionManagerAbi,
  subscriptionManagerBytecode,
} from "../../chain/contracts/artifacts/SubscriptionManager.ts";
import { deploymentFilePath, writeDeploymentFile } from "../../chain/deploymentFile.ts";
import { type DevnetFile, describeDevnet } from "../../chain/devnetFile.ts";
import { getNetworkConfig } from "../../chain/networks.ts";
import { startAnvil } from "../../chain/startAnvil.ts";
import { type Devnet, devnetPrivateKey, startDevnet } from "../../chain/startDevnet.ts";
import { planCommand } from "./plan.ts";

let devnet: Devnet;
let cwd: string;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  cwd = mkdtempSync(join(tmpdir(), "tollgate-plan-"));
  const file: DevnetFile = describeDevnet(devnet);
  writeFileSync(join(cwd, "devnet.json"), JSON.stringify(file));
});

afterAll(async () => {
  await devnet?.stop();
  if (cwd !== undefined) rmSync(cwd, { recursive: true, force: true });
});

async function plan(...argv: string[]) {
  const lines: string[] = [];
  const errors: string[] = [];
  const code = await planCommand([...argv, "--dir", cwd], {
    env: {},
    out: { log: (line) => lines.push(line), error: (line) => errors.push(line) },
  });
  return { code, lines, errors, json: () => JSON.parse(lines.join("\n")) as Record<string, unknown> };
}

describe("tollgate plan", () => {
  it("creates a plan from USDC text converted exactly, paid to the chosen devnet account", async () => {
    const created = await plan(
      "create",
      "--amount",
      "9",
      "--interval",
      "30d",
      "--included",
      "1000",
      "--overage",
      "0.001",
      "--account",
      "1",
      "--json",
    );
    expect(created.errors).toEqual([]);
    expect(created.code).toBe(0);
    const body = created.json();
    expect(body).toMatchObject({
      amount: "9000000",
      interval: 2_592_000,
      includedUnits: "1000",
      overageUnitPrice: "1000",
      provider: devnet.accounts[1]!.address,
      deprecated: false,
    });
    const onChain = await getPlan(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      planId: BigInt(String(body.planId)),
    });
    expect(onChain.amount).toBe(9_000_000n);
    expect(onChain.overageUnitPrice).toBe(1_000n);

    const shown = await plan("show", String(body.planId));
    expect(shown.lines[0]).toBe(
      `plan ${body.planId}: 9 USDC every 30d, paid to ${devnet.accounts[1]!.address}`,
    );
    expect(shown.lines).toContain("  overage: 0.001 USDC per unit");
  });

  it("deprecates a plan naming its successor", async () => {
    const a = (await plan("create", "--amount", "1", "--interval", "7d", "--account", "1", "--json")).json();
    const b = (await plan("create", "--amount", "2", "--interval", "7d", "--account", "1", "--json")).json();
    const result = await plan(
      "deprecate",
      String(a.planId),
      "--successor",
      String(b.planId),
      "--account",
      "1",
    );
    expect(result.code).toBe(0);
    const onChain = await getPlan(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      planId: BigInt(String(a.planId)),
    });
    expect(onChain.deprecated).toBe(true);
    expect(onChain.successorPlanId).toBe(BigInt(String(b.planId)));
    expect((await plan("show", String(a.planId))).lines).toContain(
      `  deprecated; successor plan ${b.planId}`,
    );
  });

  it("names a facilitator as operator and revokes it", async () => {
    const facilitator = devnet.accounts[2]!.address;
    expect((await plan("operator", facilitator, "--account", "1")).code).toBe(0);
    const params = {
      manager: devnet.contracts.subscriptionManager,
      provider: devnet.accounts[1]!.address,
      operator: facilitator,
    };
    expect(await getIsOperator(devnet.publicClient, params)).toBe(true);
    expect((await plan("operator", facilitator, "--revoke", "--account", "1")).code).toBe(0);
    expect(await getIsOperator(devnet.publicClient, params)).toBe(false);
  });

  it("refuses inexact amounts, missing keys and unknown plans", async () => {
    await expect(
      plan("create", "--amount", "0.0000001", "--interval", "30d", "--account", "1"),
    ).rejects.toMatchObject({
      code: "InvalidRequest",
      message: expect.stringContaining('--amount: "0.0000001" has more than 6 decimals'),
    });
    await expect(plan("create", "--amount", "1", "--interval", "30d")).rejects.toMatchObject({
      code: "InvalidRequest",
    });
    const create = (...flags: string[]) => plan("create", "--interval", "30d", "--account", "1", ...flags);
    await expect(create("--amount", "0")).rejects.toThrow('--amount: "0" must be above zero');
    await expect(create("--amount", "-1")).rejects.toThrow('--amount: "-1" is negative');
    await expect(create("--amount", "1", "--overage", "abc")).rejects.toThrow(
      '--overage: "abc" is not an amount',
    );
    await expect(create("--amount", "1", "--included", "2.5")).rejects.toThrow(
      '--included: "2.5" is not a count',
    );
    await expect(plan("show", "424242")).rejects.toMatchObject({ code: "NotFound" });
    expect((await plan("create", "--amount", "1")).code).toBe(2);
    expect((await plan("explode")).code).toBe(2);
  });
});

describe("tollgate plan on a chain `tollgate deploy` deployed to", () => {
  it("takes the manager from the chain's deployment file and the token from the network's USDC, not from a devnet file of another chain", async () => {
    const anvil = await startAnvil({ chainId: 84532, accounts: 2 });
    const dir = mkdtempSync(join(tmpdir(), "tollgate-plan-sepolia-"));
    try {
      const chain = { ...baseSepolia, rpcUrls: { default: { http: [anvil.rpcUrl] } } };
      const issuer = createWalletClient({
        chain,
        transport: http(anvil.rpcUrl),
        account: privateKeyToAccount(devnetPrivateKey(0)),
      });
      const usdc = getNetworkConfig("eip155:84532")!.usdc!;
      await placeFiatToken(issuer, {
        testClient: createTestClient({ chain, transport: http(anvil.rpcUrl), mode: "anvil" }),
        address: usdc,
        name: "USDC",
        admin: "0x000000000000000000000000000000000000ad01",
      });
      const receipt = await waitForTransactionReceipt(issuer, {
        hash: await deployContract(issuer, {
          abi: subscriptionManagerAbi,
          bytecode: subscriptionManagerBytecode,
        }),
      });
      const manager = receipt.contractAddress!;
      writeDeploymentFile(deploymentFilePath(dir, 84532), {
        version: 1,
        network: "eip155:84532",
        chainId: 84532,
        token: { address: usdc, name: "USDC", version: "2", symbol: "USDC", decimals: 6, kind: "network" },
        contracts: {
          batchSettler: "0x0000000000000000000000000000000000000b01",
          subscriptionManager: manager,
          channels: "0x0000000000000000000000000000000000000c01",
        },
        codeHashes: { batchSettler: zeroHash, subscriptionManager: zeroHash, channels: zeroHash },
        salt: zeroHash,
        deployer: issuer.account.address,
        deployedAt: new Date(0).toISOString(),
        transactions: [],
      });
      // A devnet left over in the same directory describes chain 31337, not this one.
      writeFileSync(join(dir, "devnet.json"), JSON.stringify(describeDevnet(devnet)));

      const lines: string[] = [];
      const errors: string[] = [];
      const code = await planCommand(
        ["create", "--amount", "9", "--interval", "30d", "--rpc", anvil.rpcUrl, "--dir", dir, "--json"],
        {
          env: { TOLLGATE_PROVIDER_KEY: devnetPrivateKey(1) },
          out: { log: (line) => lines.push(line), error: (line) => errors.push(line) },
        },
      );
      expect(errors).toEqual([]);
      expect(code).toBe(0);
      const created = JSON.parse(lines.join("\n")) as { planId: string; token: string };
      expect(created.token).toBe(usdc);
      const reader = createPublicClient({ chain, transport: http(anvil.rpcUrl) });
      const onChain = await getPlan(reader, { manager, planId: BigInt(created.planId) });
      expect(onChain).toMatchObject({ token: usdc, amount: 9_000_000n });
    } finally {
      await anvil.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
