import { type Address, type Hex, keccak256, parseEventLogs, stringToBytes, zeroAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { deployContract } from "viem/actions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchSettlerAbi } from "../src/chain/contracts/artifacts/BatchSettler.ts";
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
import { transferWithAuthorizationTypes } from "../src/chain/signers/eip712Types.ts";
import { compileFixtureContracts } from "./fixtures/compileFixtureContracts.ts";

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
    const { authorization: a, signature } = await item(1, "batch-f");
    await expect(
      devnet.publicClient.simulateContract({
        address: devnet.contracts.batchSettler,
        abi: batchSettlerAbi,
        functionName: "settle",
        args: [zeroAddress, [{ ...a, signature }]],
      }),
    ).rejects.toThrow(/NotAContract/);
    // `settle` sends with a computed gas limit (not an estimate), so the refusal is a reverted receipt.
    const receipt = await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: zeroAddress,
        items: [{ authorization: a, signature }],
      }),
    );
    expect(receipt.status).toBe("reverted");
  });

  // ---- hostile payers and tokens ------------------------------------------------------------------

  /** The gas the facilitator budgets for a batch of 10 (80 000 + 110 000 per item, plus headroom). */
  const TEN_ITEM_GAS = 1_500_000n;

  async function deployFixture(name: string, args: readonly unknown[] = []): Promise<Address> {
    const { abi, bytecode } = compileFixtureContracts("HostileSettlement.sol")[name]!;
    const receipt = await wait(
      await deployContract(devnet.walletClient(devnet.deployer), { abi, bytecode, args }),
    );
    return receipt.contractAddress!;
  }

  /** Nine fresh funded EOA payers' items. */
  async function honestItems(tag: string, count = 9): Promise<SettlementItem[]> {
    const items: SettlementItem[] = [];
    const now = (await devnet.publicClient.getBlock()).timestamp;
    for (let i = 0; i < count; i++) {
      const account = privateKeyToAccount(generatePrivateKey());
      await devnet.fund(account.address, { usd: 1_000_000n });
      const authorization: TransferAuthorization = {
        from: account.address,
        to: devnet.accounts[4]!.address,
        value: 250_000n,
        validAfter: 0n,
        validBefore: now + 600n,
        nonce: keccak256(stringToBytes(`${tag}-${i}`)),
      };
      items.push({
        authorization,
        signature: await signTransferAuthorization(account, { domain: usdDomain(), authorization }),
      });
    }
    return items;
  }

  const usdDomain = () => ({
    name: "USD Coin",
    version: "2",
    chainId: devnet.chain.id,
    verifyingContract: devnet.contracts.usd,
  });

  /** An item paid from `from` (a contract wallet or delegated EOA) and signed by `signer`'s key. */
  async function itemFrom(from: Address, signer: ReturnType<typeof privateKeyToAccount>, memo: string) {
    const now = (await devnet.publicClient.getBlock()).timestamp;
    const authorization: TransferAuthorization = {
      from,
      to: devnet.accounts[4]!.address,
      value: 250_000n,
      validAfter: 0n,
      validBefore: now + 600n,
      nonce: keccak256(stringToBytes(memo)),
    };
    // Signed by the key behind `from`, which for a contract wallet is its owner (checked by ERC-1271).
    const signature = await signer.signTypedData({
      domain: usdDomain(),
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: authorization,
    });
    return { authorization, signature };
  }

  it("fails an ERC-1271 payer whose wallet burns gas alone: nine of ten settle within a bounded gas", async () => {
    const owner = privateKeyToAccount(generatePrivateKey());
    // The wallet accepts its owner's signatures, except in transactions sent by the relayer (the deployer
    // here), where it burns every gas unit it is offered.
    const wallet = await deployFixture("GasBurningWallet", [owner.address, devnet.deployer.address]);
    await devnet.fund(wallet, { usd: 1_000_000n });
    const hostile = await itemFrom(wallet, owner, "burner-1271");
    const items = [hostile, ...(await honestItems("honest-1271"))];
    const payeeBefore = await balance(devnet.accounts[4]!.address);
    const receipt = await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: devnet.contracts.usd,
        items,
        gas: TEN_ITEM_GAS,
      }),
    );
    expect(receipt.status).toBe("success");
    expect(decodeSettlerEvents(receipt.logs).map((o) => o.ok)).toEqual([false, ...Array(9).fill(true)]);
    expect(await balance(devnet.accounts[4]!.address)).toBe(payeeBefore + 9n * 250_000n);
    // Nine transfers (~47 000 each) and one item capped at 150 000: far below the 10.9M the hostile wallet
    // made a batch need before.
    expect(receipt.gasUsed).toBeLessThan(800_000n);
  });

  it("fails an EIP-7702 delegated payer whose delegate burns gas alone", async () => {
    const delegate = await deployFixture("GasBurningDelegate");
    const eoa = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(eoa.address, { usd: 1_000_000n });
    // Signed while the payer was a plain EOA, as the facilitator's preflight saw it; delegated afterwards
    // (the authorization is sent by a sponsor, so the payer needs no ETH).
    const hostile = await itemFrom(eoa.address, eoa, "burner-7702");
    const authorization = await devnet.walletClient(eoa).signAuthorization({ contractAddress: delegate });
    await wait(
      await devnet.walletClient(devnet.deployer).sendTransaction({
        to: devnet.deployer.address,
        authorizationList: [authorization],
        data: "0x",
      }),
    );
    expect(await devnet.publicClient.getCode({ address: eoa.address })).toMatch(/^0xef0100/);
    const items = [
      ...(await honestItems("honest-7702", 4)),
      hostile,
      ...(await honestItems("honest-7702b", 5)),
    ];
    const receipt = await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: devnet.contracts.usd,
        items,
        gas: TEN_ITEM_GAS,
      }),
    );
    expect(receipt.status).toBe("success");
    const outcomes = decodeSettlerEvents(receipt.logs);
    expect(outcomes.map((o) => o.ok)).toEqual([true, true, true, true, false, true, true, true, true, true]);
    expect(receipt.gasUsed).toBeLessThan(800_000n);
  });

  it("copies at most 256 bytes of an item's revert data", async () => {
    const bomb = await deployFixture("RevertBombToken");
    const receipt = await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: bomb,
        items: [await item(1, "bomb-a"), await item(2, "bomb-b")],
        gas: 1_000_000n,
      }),
    );
    expect(receipt.status).toBe("success");
    const outcomes = decodeSettlerEvents(receipt.logs);
    expect(outcomes.map((o) => o.ok)).toEqual([false, false]);
    for (const o of outcomes) if (!o.ok) expect((o.reason.length - 2) / 2).toBe(256);
  });

  it("defers the items it cannot give their full gas instead of failing them or the batch", async () => {
    const items = await honestItems("deferred", 3);
    // Enough for the first item only: later items are not attempted, and say so.
    const receipt = await wait(
      await settle(devnet.walletClient(devnet.deployer), {
        settler: devnet.contracts.batchSettler,
        token: devnet.contracts.usd,
        items,
        gas: 240_000n,
      }),
    );
    expect(receipt.status).toBe("success");
    expect(decodeSettlerEvents(receipt.logs).map((o) => o.ok)).toEqual([true]);
    const deferred = parseEventLogs({ abi: batchSettlerAbi, logs: receipt.logs, eventName: "Deferred" });
    expect(deferred.map((e) => [e.args.firstIndex, e.args.count])).toEqual([[1n, 2n]]);
    const state = (i: number) =>
      getAuthorizationState(devnet.publicClient, {
        token: devnet.contracts.usd,
        authorizer: items[i]!.authorization.from,
        nonce: items[i]!.authorization.nonce,
      });
    expect([await state(0), await state(1), await state(2)]).toEqual([true, false, false]);
  });
});
