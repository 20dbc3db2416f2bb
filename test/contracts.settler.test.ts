import { type Hex, keccak256, stringToBytes, zeroAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type Devnet,
  decodeSettlerEvents,
  getAuthorizationState,
  getTokenBalance,
  type SettlementItem,
  settle,
  signTransferAuthorization,
  startDevnet,
  type TransferAuthorization,
} from "../src/chain/index.ts";

describe("BatchSettler", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 5 });
  });
  afterAll(() => devnet.stop());

  const wait = (hash: Hex) => devnet.publicClient.waitForTransactionReceipt({ hash });
  const balance = (owner: Hex) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

  async function item(payerIndex: number, memo: string, overrides: Partial<TransferAuthorization> = {}) {
    const payer = devnet.accounts[payerIndex]!;
    const now = (await devnet.publicClient.getBlock()).timestamp;
    const authorization: TransferAuthorization = {
      from: payer.address,
      to: devnet.accounts[4]!.address,
      value: 250_000n,
      validAfter: 0n,
      validBefore: now + 600n,
      nonce: keccak256(stringToBytes(memo)),
      ...overrides,
    };
    const domain = {
      name: "USD Coin",
      version: "2",
      chainId: devnet.chain.id,
      verifyingContract: devnet.contracts.usd,
    };
    return {
      authorization,
      signature: await signTransferAuthorization(payer.account, { domain, authorization }),
    };
  }

  it("settles a batch item by item: one expired authorization fails alone", async () => {
    const now = (await devnet.publicClient.getBlock()).timestamp;
    const items: SettlementItem[] = [
      await item(1, "batch-a"),
      await item(2, "batch-b", { validBefore: now }),
      await item(3, "batch-c"),
    ];
    const payeeBefore = await balance(devnet.accounts[4]!.address);
    const receipt = await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: devnet.contracts.usd,
        items,
      }),
    );
    expect(receipt.status).toBe("success");
    const outcomes = decodeSettlerEvents(receipt.logs);
    expect(outcomes.map((o) => o.ok)).toEqual([true, false, true]);
    expect(outcomes[1]).toMatchObject({
      from: devnet.accounts[2]!.address,
      ok: false,
      error: "AuthorizationExpired",
    });
    expect(await balance(devnet.accounts[4]!.address)).toBe(payeeBefore + 500_000n);
    const state = (i: number) =>
      getAuthorizationState(devnet.publicClient, {
        token: devnet.contracts.usd,
        authorizer: items[i]!.authorization.from,
        nonce: items[i]!.authorization.nonce,
      });
    expect([await state(0), await state(1), await state(2)]).toEqual([true, false, true]);
  });

  it("reports a replayed and an underfunded item as failures with their reasons", async () => {
    const replay = await item(1, "batch-g");
    await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: devnet.contracts.usd,
        items: [replay],
      }),
    );
    const fresh = await item(1, "batch-d");
    const tooMuch = await item(2, "batch-e", { value: 10n ** 15n });
    const receipt = await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: devnet.contracts.usd,
        items: [replay, fresh, tooMuch],
      }),
    );
    expect(decodeSettlerEvents(receipt.logs).map((o) => (o.ok ? "ok" : o.error))).toEqual([
      "AuthorizationAlreadyUsed",
      "ok",
      "ERC20InsufficientBalance",
    ]);
  });

  it("refuses a token address without code", async () => {
    await expect(
      settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: zeroAddress,
        items: [await item(1, "batch-f")],
      }),
    ).rejects.toThrow(/NotAContract/);
  });
});
