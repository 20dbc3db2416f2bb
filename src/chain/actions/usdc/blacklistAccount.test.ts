import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../../startDevnet.ts";
import { blacklistAccount } from "./blacklistAccount.ts";
import { getIsBlacklisted } from "./getIsBlacklisted.ts";
import { mintFiatToken } from "./mintFiatToken.ts";
import { unBlacklistAccount } from "./unBlacklistAccount.ts";

describe("blacklistAccount, unBlacklistAccount and getIsBlacklisted", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 3, balance: 0n });
  });
  afterAll(() => devnet?.stop());

  const wait = async (hash: `0x${string}`) =>
    expect((await devnet.publicClient.waitForTransactionReceipt({ hash })).status).toBe("success");

  it("blacklists an account so the token refuses to pay it, and lifts it again", async () => {
    const token = devnet.contracts.usd;
    const [deployer, held, stranger] = devnet.accounts;
    // On a devnet the deployer holds every FiatToken role, the blacklister's included.
    const blacklister = devnet.walletClient(deployer!);
    const account = held!.address;
    expect(await getIsBlacklisted(devnet.publicClient, { token, account })).toBe(false);

    await wait(await blacklistAccount(blacklister, { token, account }));
    expect(await getIsBlacklisted(devnet.publicClient, { token, account })).toBe(true);
    expect(await getIsBlacklisted(devnet.publicClient, { token, account: stranger!.address })).toBe(false);
    await expect(mintFiatToken(blacklister, { token, to: account, amount: 1n })).rejects.toThrow(
      /account is blacklisted/,
    );

    await wait(await unBlacklistAccount(blacklister, { token, account }));
    expect(await getIsBlacklisted(devnet.publicClient, { token, account })).toBe(false);
    await wait(await mintFiatToken(blacklister, { token, to: account, amount: 1n }));
  });

  it("refuses to blacklist for an account that is not the token's blacklister", async () => {
    const token = devnet.contracts.usd;
    const [, held, stranger] = devnet.accounts;
    await expect(
      blacklistAccount(devnet.walletClient(stranger!), { token, account: held!.address }),
    ).rejects.toThrow(/caller is not the blacklister/);
  });
});
