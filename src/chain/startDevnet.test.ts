import { createServer } from "node:net";
import { toHex } from "viem";
import { mnemonicToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fiatTokenV2_2Abi } from "./contracts/circle-usdc/FiatTokenV2_2.ts";
import { DevnetFileSchema, describeDevnet } from "./devnetFile.ts";
import { anvilMnemonic, type Devnet, devnetPrivateKey, startDevnet } from "./startDevnet.ts";

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

describe("startDevnet", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 3, balance: 5_000_000n });
  });
  afterAll(async () => {
    await devnet.stop();
  });

  it("derives anvil's well-known dev accounts", () => {
    expect(devnet.accounts).toHaveLength(3);
    expect(devnet.deployer.address).toBe("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
    expect(devnetPrivateKey(1)).toBe("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
  });

  it("derives each dev key as viem derives it from the mnemonic", () => {
    for (const index of [0, 2, 9, 10, 137]) {
      const hdKey = mnemonicToAccount(anvilMnemonic, { addressIndex: index }).getHdKey();
      expect(devnetPrivateKey(index)).toBe(toHex(hdKey.privateKey!));
    }
  });

  it("deploys the contracts and Circle's USDC, the deployer its minter, and funds every account with it", async () => {
    for (const address of Object.values(devnet.contracts)) {
      const code = await devnet.publicClient.getCode({ address });
      expect(code?.length ?? 0).toBeGreaterThan(2);
    }
    for (const { address } of devnet.accounts) {
      const balance = await devnet.publicClient.readContract({
        address: devnet.contracts.usd,
        abi: fiatTokenV2_2Abi,
        functionName: "balanceOf",
        args: [address],
      });
      expect(balance).toBe(5_000_000n);
    }
    const read = { address: devnet.contracts.usd, abi: fiatTokenV2_2Abi } as const;
    // currency() and isMinter() are FiatToken's own: the token is Circle's code, not a plain ERC-20.
    expect(await devnet.publicClient.readContract({ ...read, functionName: "currency" })).toBe("USD");
    expect(
      await devnet.publicClient.readContract({
        ...read,
        functionName: "isMinter",
        args: [devnet.deployer.address],
      }),
    ).toBe(true);
  });

  it("names the token it settles in, and its devnet file records it; a file without it still reads", () => {
    expect(devnet.token).toEqual({ kind: "usdc", name: "USD Coin", version: "2" });
    const file = describeDevnet(devnet, 1234);
    expect(DevnetFileSchema.parse(JSON.parse(JSON.stringify(file))).token).toEqual(devnet.token);
    const { token: _, ...older } = file;
    expect(DevnetFileSchema.parse(older).token).toBeUndefined();
    expect(() => DevnetFileSchema.parse({ ...file, token: { ...file.token, kind: "dai" } })).toThrow();
  });

  it("advanceTime moves block.timestamp forward", async () => {
    const before = (await devnet.publicClient.getBlock()).timestamp;
    const after = await devnet.advanceTime(30 * 86_400);
    expect(after - before).toBeGreaterThanOrEqual(30n * 86_400n);
    expect((await devnet.publicClient.getBlock()).timestamp).toBe(after);
  });

  it("revert returns to a snapshot", async () => {
    const id = await devnet.snapshot();
    const start = await devnet.publicClient.getBlockNumber();
    await devnet.mine(3);
    expect(await devnet.publicClient.getBlockNumber()).toBe(start + 3n);
    await devnet.revert(id);
    expect(await devnet.publicClient.getBlockNumber()).toBe(start);
  });
});

describe("stopping a devnet", () => {
  it("frees its port and may be called twice", async () => {
    const devnet = await startDevnet({ accounts: 1, balance: 0n });
    const port = Number(new URL(devnet.rpcUrl).port);
    expect(await canListen(port)).toBe(false);
    await devnet.stop();
    await devnet.stop();
    expect(await canListen(port)).toBe(true);
  });
});
