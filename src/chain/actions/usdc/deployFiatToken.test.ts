import { createWalletClient, getAddress, http, isHex, padHex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  fiatTokenV2_2Abi,
  fiatTokenV2_2Bytecode,
  fiatTokenV2_2LinkReferences,
} from "../../contracts/circle-usdc/FiatTokenV2_2.ts";
import { startAnvil } from "../../startAnvil.ts";
import { connectDevnet } from "../../startDevnet.ts";
import { deployFiatToken } from "./deployFiatToken.ts";
import { linkFiatTokenBytecode } from "./deployFiatTokenImplementation.ts";
import { mintFiatToken } from "./mintFiatToken.ts";
import { FIAT_TOKEN_PROXY_ADMIN_SLOT, FIAT_TOKEN_PROXY_IMPLEMENTATION_SLOT } from "./placeFiatToken.ts";

describe("linkFiatTokenBytecode", () => {
  it("writes the library address at every link offset and leaves no placeholder", () => {
    const library = getAddress("0x00000000000000000000000000000000000abcde");
    const linked = linkFiatTokenBytecode(library);
    expect(isHex(linked, { strict: true })).toBe(true);
    expect(linked).toHaveLength(fiatTokenV2_2Bytecode.length);
    expect(fiatTokenV2_2LinkReferences.length).toBeGreaterThan(0);
    for (const { start, length } of fiatTokenV2_2LinkReferences) {
      expect(`0x${linked.slice(2 + start * 2, 2 + (start + length) * 2)}`).toBe(library.toLowerCase());
    }
  });
});

describe("deployFiatToken", () => {
  let devnet: ReturnType<typeof connectDevnet>;
  beforeAll(async () => {
    const anvil = await startAnvil({ accounts: 6 });
    devnet = connectDevnet(anvil.rpcUrl, 6, () => anvil.stop());
  });
  afterAll(() => devnet?.stop());

  it("refuses to make the sending account the proxy's admin, before sending anything", async () => {
    const client = createWalletClient({
      account: devnet.deployer.account,
      chain: devnet.chain,
      transport: http("http://127.0.0.1:1"),
    });
    await expect(deployFiatToken(client, { admin: devnet.deployer.address })).rejects.toThrow(/admin/);
  });

  it("initializes the token with the given name and roles, behind a proxy whose admin and implementation are set", async () => {
    const [deployer, admin, pauser, blacklister, owner, holder] = devnet.accounts;
    const client = devnet.walletClient(deployer!);
    const { token, implementation } = await deployFiatToken(client, {
      name: "USDC",
      admin: admin!.address,
      pauser: pauser!.address,
      blacklister: blacklister!.address,
      owner: owner!.address,
      minterAllowance: 1_000_000n,
    });
    const read = <
      const F extends "name" | "version" | "symbol" | "decimals" | "pauser" | "blacklister" | "owner",
    >(
      functionName: F,
    ) => devnet.publicClient.readContract({ address: token, abi: fiatTokenV2_2Abi, functionName });
    expect(await read("name")).toBe("USDC");
    expect(await read("version")).toBe("2");
    expect(await read("symbol")).toBe("USDC");
    expect(await read("decimals")).toBe(6);
    expect(await read("pauser")).toBe(pauser!.address);
    expect(await read("blacklister")).toBe(blacklister!.address);
    expect(await read("owner")).toBe(owner!.address);
    const slot = (index: `0x${string}`) => devnet.publicClient.getStorageAt({ address: token, slot: index });
    expect(await slot(FIAT_TOKEN_PROXY_IMPLEMENTATION_SLOT)).toBe(
      padHex(implementation.toLowerCase() as `0x${string}`),
    );
    expect(await slot(FIAT_TOKEN_PROXY_ADMIN_SLOT)).toBe(
      padHex(admin!.address.toLowerCase() as `0x${string}`),
    );

    // The deployer is the minter, up to its allowance and not beyond.
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await mintFiatToken(client, { token, to: holder!.address, amount: 1_000_000n }),
    });
    expect(
      await devnet.publicClient.readContract({
        address: token,
        abi: fiatTokenV2_2Abi,
        functionName: "balanceOf",
        args: [holder!.address],
      }),
    ).toBe(1_000_000n);
    await expect(mintFiatToken(client, { token, to: holder!.address, amount: 1n })).rejects.toThrow(
      /exceeds minterAllowance/,
    );
  });
});
