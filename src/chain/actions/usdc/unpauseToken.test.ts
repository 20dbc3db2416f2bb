import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../../startDevnet.ts";
import { getTokenBalance } from "../usd/getTokenBalance.ts";
import { transferToken } from "../usd/transferToken.ts";
import { isTokenPaused } from "./isTokenPaused.ts";
import { pauseToken } from "./pauseToken.ts";
import { unpauseToken } from "./unpauseToken.ts";

describe("unpauseToken", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 3 });
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await pauseToken(devnet.walletClient(devnet.deployer), { token: devnet.contracts.usd }),
    });
  });
  afterAll(() => devnet?.stop());

  it("refuses an account that is not the pauser, and the token stays paused", async () => {
    const [, holder] = devnet.accounts;
    await expect(unpauseToken(devnet.walletClient(holder!), { token: devnet.contracts.usd })).rejects.toThrow(
      /caller is not the pauser/,
    );
    expect(await isTokenPaused(devnet.publicClient, { token: devnet.contracts.usd })).toBe(true);
  });

  it("lets transfers through again once the pauser unpauses the token", async () => {
    const [, holder, other] = devnet.accounts;
    const token = devnet.contracts.usd;
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await unpauseToken(devnet.walletClient(devnet.deployer), { token }),
    });
    expect(await isTokenPaused(devnet.publicClient, { token })).toBe(false);
    const before = await getTokenBalance(devnet.publicClient, { token, owner: other!.address });
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await transferToken(devnet.walletClient(holder!), { token, to: other!.address, amount: 5n }),
    });
    expect(await getTokenBalance(devnet.publicClient, { token, owner: other!.address })).toBe(before + 5n);
  });
});
