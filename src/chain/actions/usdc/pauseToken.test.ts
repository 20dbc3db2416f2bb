import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../../startDevnet.ts";
import { transferToken } from "../usd/transferToken.ts";
import { isTokenPaused } from "./isTokenPaused.ts";
import { pauseToken } from "./pauseToken.ts";

describe("pauseToken", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 3 });
  });
  afterAll(() => devnet?.stop());

  it("refuses an account that is not the pauser, and leaves the token running", async () => {
    const [, holder] = devnet.accounts;
    await expect(pauseToken(devnet.walletClient(holder!), { token: devnet.contracts.usd })).rejects.toThrow(
      /caller is not the pauser/,
    );
    expect(await isTokenPaused(devnet.publicClient, { token: devnet.contracts.usd })).toBe(false);
  });

  it("stops every transfer once the pauser pauses the token", async () => {
    const [deployer, holder, other] = devnet.accounts;
    const token = devnet.contracts.usd;
    const receipt = await devnet.publicClient.waitForTransactionReceipt({
      hash: await pauseToken(devnet.walletClient(deployer!), { token }),
    });
    expect(receipt.status).toBe("success");
    expect(await isTokenPaused(devnet.publicClient, { token })).toBe(true);
    await expect(
      transferToken(devnet.walletClient(holder!), { token, to: other!.address, amount: 1n }),
    ).rejects.toThrow(/Pausable: paused/);
  });
});
