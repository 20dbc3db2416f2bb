import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compileFixture } from "../../../../test/support/compileFixtures.ts";
import { isTollgateError } from "../../../protocol/errors.ts";
import { startAnvil } from "../../startAnvil.ts";
import { connectDevnet } from "../../startDevnet.ts";
import { deployFiatToken } from "../usdc/deployFiatToken.ts";
import { readSettlementToken } from "./readSettlementToken.ts";

describe("readSettlementToken", () => {
  let devnet: ReturnType<typeof connectDevnet>;
  beforeAll(async () => {
    const anvil = await startAnvil({ accounts: 2 });
    devnet = connectDevnet(anvil.rpcUrl, 2, () => anvil.stop());
  });
  afterAll(() => devnet?.stop());

  async function errorOf(token: `0x${string}`) {
    const error = await readSettlementToken(devnet.publicClient, { token }).catch((e: unknown) => e);
    return isTollgateError(error) ? error : undefined;
  }

  it("reads USDC's EIP-712 domain, symbol and decimals, its separator agreeing", async () => {
    const { token } = await deployFiatToken(devnet.walletClient(devnet.deployer), {
      admin: devnet.accounts[1]!.address,
      name: "USDC",
    });
    expect(await readSettlementToken(devnet.publicClient, { token })).toEqual({
      address: token,
      name: "USDC",
      version: "2",
      symbol: "USDC",
      decimals: 6,
    });
  });

  it("refuses a token whose DOMAIN_SEPARATOR() is not the domain its name() and version() say", async () => {
    const { abi, bytecode } = compileFixture("LookalikeToken.sol").LookalikeToken!;
    const client = devnet.walletClient(devnet.deployer);
    const hash = await client.deployContract({ abi, bytecode });
    const { contractAddress } = await devnet.publicClient.waitForTransactionReceipt({ hash });
    const error = await errorOf(contractAddress!);
    expect(error?.code).toBe("UnsupportedToken");
    expect(error?.message).toContain("another EIP-712 domain");
  });

  it("refuses an address without code, and a contract that is no token", async () => {
    expect((await errorOf("0x1111111111111111111111111111111111111111"))?.message).toContain("has no code");
    await devnet.testClient.setCode({
      address: "0x2222222222222222222222222222222222222222",
      bytecode: "0x00",
    });
    expect((await errorOf("0x2222222222222222222222222222222222222222"))?.message).toContain(
      "does not answer",
    );
  });
});
