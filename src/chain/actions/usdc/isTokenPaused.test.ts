import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../../startDevnet.ts";
import { isTokenPaused } from "./isTokenPaused.ts";
import { pauseToken } from "./pauseToken.ts";

describe("isTokenPaused", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 1 });
  });
  afterAll(() => devnet?.stop());

  it("reads false for a running FiatToken and true once its pauser paused it", async () => {
    const token = devnet.contracts.usd;
    expect(await isTokenPaused(devnet.publicClient, { token })).toBe(false);
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await pauseToken(devnet.walletClient(devnet.deployer), { token }),
    });
    expect(await isTokenPaused(devnet.publicClient, { token })).toBe(true);
  });

  it("rejects for a contract without paused()", async () => {
    await expect(
      isTokenPaused(devnet.publicClient, { token: devnet.contracts.batchSettler }),
    ).rejects.toThrow();
  });
});
