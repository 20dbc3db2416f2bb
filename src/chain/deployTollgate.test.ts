import { createWalletClient, defineChain, http } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenDomain } from "./actions/usd/getTokenDomain.ts";
import { getTokenOwner } from "./actions/usd/getTokenOwner.ts";
import { fiatTokenV2_2Abi } from "./contracts/circle-usdc/FiatTokenV2_2.ts";
import { deployTollgate } from "./deployTollgate.ts";
import { type Devnet, startDevnet } from "./startDevnet.ts";

/** A chain Tollgate knows nothing about (no USDC address), served by the same anvil. */
const unknownChain = defineChain({
  id: 4242,
  name: "unknown",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: ["http://127.0.0.1:8545"] } },
});

describe("deployTollgate", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 2 });
  });
  afterAll(() => devnet.stop());

  it("deploys a test USDC on the devnet, Circle's FiatToken v2.2 whose minter is the deployer", async () => {
    const contracts = await deployTollgate(devnet.walletClient(devnet.deployer), devnet.publicClient);
    expect(contracts.usd).not.toBe(devnet.contracts.usd);
    expect(await getTokenDomain(devnet.publicClient, { token: contracts.usd })).toMatchObject({
      name: "USD Coin",
      version: "2",
    });
    const read = { address: contracts.usd, abi: fiatTokenV2_2Abi } as const;
    expect(await devnet.publicClient.readContract({ ...read, functionName: "currency" })).toBe("USD");
    expect(
      await devnet.publicClient.readContract({
        ...read,
        functionName: "isMinter",
        args: [devnet.deployer.address],
      }),
    ).toBe(true);
  });

  describe("on a chain it does not know", () => {
    beforeAll(async () => {
      await setChainId(unknownChain.id);
    });
    afterAll(async () => {
      await setChainId(devnet.chain.id);
    });

    /** anvil_setChainId (not in viem's test actions): the same node now answers as another chain. */
    const setChainId = (id: number) =>
      fetch(devnet.rpcUrl, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "anvil_setChainId", params: [id] }),
      });

    const wallet = () =>
      createWalletClient({
        account: devnet.deployer.account,
        chain: unknownChain,
        transport: http(devnet.rpcUrl),
      });

    it("refuses to deploy a deployer-mintable USD Coin without a token or an explicit flag, and sends nothing", async () => {
      const nonce = await devnet.publicClient.getTransactionCount({ address: devnet.deployer.address });
      await expect(deployTollgate(wallet(), devnet.publicClient)).rejects.toMatchObject({
        code: "InvalidRequest",
        message: expect.stringMatching(/no known USDC.*`usd`.*allowTestToken/),
      });
      expect(await devnet.publicClient.getTransactionCount({ address: devnet.deployer.address })).toBe(nonce);
    });

    it("uses the given token, and deploys the test token only with allowTestToken", async () => {
      const given = await deployTollgate(wallet(), devnet.publicClient, { usd: devnet.contracts.usd });
      expect(given.usd).toBe(devnet.contracts.usd);
      const test = await deployTollgate(wallet(), devnet.publicClient, { allowTestToken: true });
      expect(test.usd).not.toBe(devnet.contracts.usd);
      expect(await getTokenOwner(devnet.publicClient, { token: test.usd })).toBe(devnet.deployer.address);
    });
  });
});
