/**
 * Tollgate's money paths on Circle's real USDC code (FiatToken v2.2, src/chain/contracts/circle-usdc),
 * the token every devnet runs on: a one-time payment through a facilitator and gate, a BatchSettler batch, a
 * subscription renewed under approval, a permit and a cancelled authorization, a channel opened with
 * receiveWithAuthorization and claimed, and the token placed at Base Sepolia's USDC address with that
 * network's domain.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { type Address, getAddress, type Hex, keccak256, maxUint256, stringToBytes } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimChannels } from "../src/chain/actions/channels/claimChannels.ts";
import { decodeChannelClaims } from "../src/chain/actions/channels/decodeChannelEvents.ts";
import { openChannelWithAuthorization } from "../src/chain/actions/channels/openChannelWithAuthorization.ts";
import { signChannelOpen } from "../src/chain/actions/channels/signChannelOpen.ts";
import {
  approveToken,
  cancelAuthorization,
  collect,
  createPlan,
  decodeSettlerEvents,
  fiatTokenV2_2Abi,
  getAuthorizationState,
  getPermitNonce,
  getPlanIdFromReceipt,
  getSubscriptionIdFromReceipt,
  getTokenAllowance,
  getTokenBalance,
  getTokenDomain,
  mintFiatToken,
  permit,
  placeFiatToken,
  type SettlementItem,
  settle,
  signCancelAuthorization,
  signPermit,
  signTransferAuthorization,
  subscribe,
  transferWithAuthorization,
} from "../src/chain/index.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { decodeRevert } from "../src/facilitator/chainErrors.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createTestSessionKey, signTestVoucher } from "./support/channelSessionKey.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let usdc: Address;
let relayer: DevnetAccount;
let payer: DevnetAccount;
let provider: DevnetAccount;

const balance = (owner: Address, token = usdc) => getTokenBalance(devnet.publicClient, { token, owner });
const wait = async (hash: Hex) => {
  const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
  expect(receipt.status).toBe("success");
  return receipt;
};
const now = async () => (await devnet.publicClient.getBlock()).timestamp;
const freshAddress = () => privateKeyToAccount(generatePrivateKey()).address;

beforeAll(async () => {
  devnet = await startDevnet({ token: "usdc", accounts: 5 });
  usdc = devnet.contracts.usd;
  [relayer, payer, provider] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
});
afterAll(() => devnet?.stop());

describe("a devnet on Circle's FiatToken v2.2", () => {
  it("settles in a token whose domain, read from the chain, is USDC's on Base and whose accounts were funded by minting", async () => {
    expect(await getTokenDomain(devnet.publicClient, { token: usdc })).toEqual({
      name: "USD Coin",
      version: "2",
      verifyingContract: usdc,
    });
    // FiatToken's own functions answer: this is Circle's code, not a plain ERC-20.
    const read = (functionName: "currency" | "masterMinter" | "paused") =>
      devnet.publicClient.readContract({ address: usdc, abi: fiatTokenV2_2Abi, functionName });
    expect(await read("currency")).toBe("USD");
    expect(await read("masterMinter")).toBe(devnet.deployer.address);
    expect(await read("paused")).toBe(false);
    expect(await balance(payer.address)).toBe(10_000_000_000n);
  });

  it("pays a one-time 402 through a facilitator and a gate, moving the price on chain", async () => {
    let tf: TestFacilitator | undefined;
    let server: RunningServer | undefined;
    try {
      tf = await startTestFacilitator(devnet);
      const payTo = freshAddress();
      const gate = paymentGate({
        payTo,
        network: devnet.network,
        token: usdc,
        facilitator: tf.url,
        fetch,
        memoSecret: randomBytes(32),
        routes: { "GET /api/report": { price: "0.50" } },
      });
      const app = new Hono<PaymentGateEnv>();
      app.use("/api/*", honoPaymentGate(gate));
      app.get("/api/report", (c) => c.json({ paidBy: c.get("payment")?.payer }));
      server = await serveApp(app);
      const buyer = createPayer({
        account: payer.account,
        network: devnet.network,
        facilitator: tf.url,
        fetch,
      });
      const before = await balance(payer.address);
      const response = await fetchWithPayment(fetch, buyer, { maxPrice: "1.00" })(`${server.url}/api/report`);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ paidBy: payer.address });
      expect(await balance(payTo)).toBe(500_000n);
      expect(await balance(payer.address)).toBe(before - 500_000n);
    } finally {
      await server?.close();
      await tf?.stop();
    }
  });

  it("settles a BatchSettler batch of EIP-3009 transfers from several payers", async () => {
    const payee = freshAddress();
    const domain = { name: "USD Coin", version: "2", chainId: devnet.chain.id, verifyingContract: usdc };
    const validBefore = (await now()) + 3600n;
    const items: SettlementItem[] = [];
    for (const [i, from] of devnet.accounts.slice(1, 4).entries()) {
      const authorization = {
        from: from.address,
        to: payee,
        value: 100_000n,
        validAfter: 0n,
        validBefore,
        nonce: keccak256(stringToBytes(`usdc-batch-${i}`)),
      };
      items.push({
        authorization,
        signature: await signTransferAuthorization(from.account, { domain, authorization }),
      });
    }
    const receipt = await wait(
      await settle(devnet.walletClient(relayer), {
        settler: devnet.contracts.batchSettler,
        token: usdc,
        items,
      }),
    );
    expect(decodeSettlerEvents(receipt.logs).map((o) => o.ok)).toEqual([true, true, true]);
    expect(await balance(payee)).toBe(300_000n);
  });

  it("names refused batch items and gives the facilitator's codes, decoded from USDC's revert strings", async () => {
    const domain = { name: "USD Coin", version: "2", chainId: devnet.chain.id, verifyingContract: usdc };
    const at = await now();
    const broke = privateKeyToAccount(generatePrivateKey());
    const sign = async (
      from: typeof broke,
      nonce: string,
      window: { validAfter?: bigint; validBefore?: bigint } = {},
    ): Promise<SettlementItem> => {
      const authorization = {
        from: from.address,
        to: freshAddress(),
        value: 100_000n,
        validAfter: window.validAfter ?? 0n,
        validBefore: window.validBefore ?? at + 3600n,
        nonce: keccak256(stringToBytes(nonce)),
      };
      return { authorization, signature: await signTransferAuthorization(from, { domain, authorization }) };
    };
    const paid = await sign(payer.account, "usdc-replayed");
    // Signed for 0.1 USDC, presented as asking 0.2: the recovered signer is not the payer.
    const signed = await sign(payer.account, "usdc-forged");
    const forged = { ...signed, authorization: { ...signed.authorization, value: 200_000n } };
    const items = [
      paid,
      paid,
      await sign(broke, "usdc-broke"),
      await sign(payer.account, "usdc-expired", { validBefore: at - 1n }),
      await sign(payer.account, "usdc-early", { validAfter: at + 3600n }),
      forged,
    ];
    const receipt = await wait(
      await settle(devnet.walletClient(relayer), {
        settler: devnet.contracts.batchSettler,
        token: usdc,
        items,
      }),
    );
    const outcomes = decodeSettlerEvents(receipt.logs);
    expect(outcomes[0]?.ok).toBe(true);
    const refused = outcomes
      .slice(1)
      .map((o) => (o.ok ? { ok: true } : { error: o.error, message: o.message }));
    expect(refused).toEqual([
      { error: "AuthorizationAlreadyUsed", message: "FiatTokenV2: authorization is used or canceled" },
      { error: "ERC20InsufficientBalance", message: "ERC20: transfer amount exceeds balance" },
      { error: "AuthorizationExpired", message: "FiatTokenV2: authorization is expired" },
      { error: "AuthorizationNotYetValid", message: "FiatTokenV2: authorization is not yet valid" },
      { error: "InvalidSignature", message: "FiatTokenV2: invalid signature" },
    ]);
    const codes = outcomes.slice(1).map((o) => (o.ok ? "ok" : decodeRevert(o.reason)?.code));
    expect(codes).toEqual([
      "NonceAlreadyUsed",
      "InsufficientFunds",
      "AuthorizationExpired",
      "AuthorizationExpired",
      "InvalidSignature",
    ]);
  });

  it("names a batch item refused while the token is paused, and one from a blacklisted payer", async () => {
    const domain = { name: "USD Coin", version: "2", chainId: devnet.chain.id, verifyingContract: usdc };
    const validBefore = (await now()) + 3600n;
    const sign = async (from: DevnetAccount["account"], nonce: string): Promise<SettlementItem> => {
      const authorization = {
        from: from.address,
        to: freshAddress(),
        value: 100_000n,
        validAfter: 0n,
        validBefore,
        nonce: keccak256(stringToBytes(nonce)),
      };
      return { authorization, signature: await signTransferAuthorization(from, { domain, authorization }) };
    };
    const settleOne = async (item: SettlementItem) => {
      const receipt = await wait(
        await settle(devnet.walletClient(relayer), {
          settler: devnet.contracts.batchSettler,
          token: usdc,
          items: [item],
        }),
      );
      return decodeSettlerEvents(receipt.logs).map((o) =>
        o.ok ? { ok: true } : { error: o.error, message: o.message },
      );
    };
    // The deployer holds FiatToken's pauser and blacklister roles on a devnet (initializeFiatToken).
    const roles = devnet.walletClient(devnet.deployer);
    const call = async (functionName: "pause" | "unpause") =>
      wait(await roles.writeContract({ address: usdc, abi: fiatTokenV2_2Abi, functionName }));
    await call("pause");
    try {
      expect(await settleOne(await sign(payer.account, "usdc-paused"))).toEqual([
        { error: "TokenPaused", message: "Pausable: paused" },
      ]);
    } finally {
      await call("unpause");
    }
    const shunned = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(shunned.address, { usd: 1_000_000n });
    await wait(
      await roles.writeContract({
        address: usdc,
        abi: fiatTokenV2_2Abi,
        functionName: "blacklist",
        args: [shunned.address],
      }),
    );
    expect(await settleOne(await sign(shunned, "usdc-blacklisted"))).toEqual([
      { error: "AccountBlacklisted", message: "Blacklistable: account is blacklisted" },
    ]);
    expect(await balance(shunned.address)).toBe(1_000_000n);
  });

  it("creates a subscription and renews it with transferFrom under the subscriber's approval", async () => {
    const manager = devnet.contracts.subscriptionManager;
    const interval = 3600n;
    const plan = await wait(
      await createPlan(devnet.walletClient(provider), {
        manager,
        token: usdc,
        amount: 1_000_000n,
        interval,
        includedUnits: 0n,
        overageUnitPrice: 0n,
      }),
    );
    const planId = getPlanIdFromReceipt(plan);
    await wait(
      await approveToken(devnet.walletClient(payer), { token: usdc, spender: manager, amount: maxUint256 }),
    );
    const providerBefore = await balance(provider.address);
    const subscriberBefore = await balance(payer.address);
    const created = await wait(
      await subscribe(devnet.walletClient(payer), { manager, planId, maxOverage: 0n }),
    );
    const subscriptionId = getSubscriptionIdFromReceipt(created);
    expect(await balance(provider.address)).toBe(providerBefore + 1_000_000n);
    await devnet.advanceTime(interval);
    await wait(await collect(devnet.walletClient(relayer), { manager, subscriptionId }));
    expect(await balance(provider.address)).toBe(providerBefore + 2_000_000n);
    expect(await balance(payer.address)).toBe(subscriberBefore - 2_000_000n);
  });

  it("takes an EIP-2612 permit and a cancelAuthorization signed for its domain, relayed by another account", async () => {
    const domain = { name: "USD Coin", version: "2", chainId: devnet.chain.id, verifyingContract: usdc };
    const spender = freshAddress();
    const deadline = (await now()) + 600n;
    const nonce = await getPermitNonce(devnet.publicClient, { token: usdc, owner: payer.address });
    const signature = await signPermit(payer.account, {
      domain,
      spender,
      value: 7_000_000n,
      nonce,
      deadline,
    });
    await wait(
      await permit(devnet.walletClient(relayer), {
        token: usdc,
        owner: payer.address,
        spender,
        value: 7_000_000n,
        deadline,
        signature,
      }),
    );
    expect(await getTokenAllowance(devnet.publicClient, { token: usdc, owner: payer.address, spender })).toBe(
      7_000_000n,
    );

    const burnt = keccak256(stringToBytes("usdc-cancelled"));
    const cancelSignature = await signCancelAuthorization(payer.account, {
      domain,
      nonce: burnt,
    });
    await wait(
      await cancelAuthorization(devnet.walletClient(relayer), {
        token: usdc,
        authorizer: payer.address,
        nonce: burnt,
        signature: cancelSignature,
      }),
    );
    expect(
      await getAuthorizationState(devnet.publicClient, {
        token: usdc,
        authorizer: payer.address,
        nonce: burnt,
      }),
    ).toBe(true);
  });

  it("opens a channel with receiveWithAuthorization (bytes signature) and lets the payee claim a voucher", async () => {
    const channels = devnet.contracts.channels;
    const key = createTestSessionKey();
    const salt = keccak256(stringToBytes("usdc-channel"));
    const amount = 2_000_000n;
    const terms = {
      payee: provider.address,
      amount,
      sessionKeyX: key.x,
      sessionKeyY: key.y,
      closeDelay: 3600n,
      salt,
      validAfter: 0n,
      validBefore: (await now()) + 600n,
    };
    const signed = await signChannelOpen(payer.account, {
      chainId: devnet.chain.id,
      channels,
      tokenDomain: {
        ...(await getTokenDomain(devnet.publicClient, { token: usdc })),
        chainId: devnet.chain.id,
      },
      ...terms,
    });
    const payerBefore = await balance(payer.address);
    await wait(
      await openChannelWithAuthorization(devnet.walletClient(relayer), {
        channels,
        payer: payer.address,
        token: usdc,
        signature: signed.signature,
        ...terms,
      }),
    );
    expect(await balance(payer.address)).toBe(payerBefore - amount);
    expect(await balance(channels)).toBe(amount);
    const providerBefore = await balance(provider.address);
    const cumulativeAmount = 750_000n;
    const signature = signTestVoucher(key, {
      chainId: devnet.chain.id,
      channels,
      channelId: signed.channelId,
      cumulativeAmount,
    });
    const receipt = await wait(
      await claimChannels(devnet.walletClient(provider), {
        channels,
        claims: [{ channelId: signed.channelId, cumulativeAmount, signature }],
      }),
    );
    expect(decodeChannelClaims(receipt.logs).outcomes).toMatchObject([
      { ok: true, amount: cumulativeAmount },
    ]);
    expect(await balance(provider.address)).toBe(providerBefore + cumulativeAmount);
  });

  it("places USDC at Base Sepolia's address with its domain, and a transferWithAuthorization signed for that domain settles", async () => {
    const baseSepoliaUsdc = getAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    const admin = freshAddress();
    const { token } = await placeFiatToken(devnet.walletClient(relayer), {
      testClient: devnet.testClient,
      address: baseSepoliaUsdc,
      name: "USDC",
      admin,
    });
    expect(token).toBe(baseSepoliaUsdc);
    expect(await getTokenDomain(devnet.publicClient, { token })).toEqual({
      name: "USDC",
      version: "2",
      verifyingContract: baseSepoliaUsdc,
    });
    await wait(
      await mintFiatToken(devnet.walletClient(relayer), { token, to: payer.address, amount: 5_000_000n }),
    );
    const to = freshAddress();
    const authorization = {
      from: payer.address,
      to,
      value: 1_250_000n,
      validAfter: 0n,
      validBefore: (await now()) + 600n,
      nonce: keccak256(stringToBytes("usdc-base-sepolia")),
    };
    const signature = await signTransferAuthorization(payer.account, {
      domain: { name: "USDC", version: "2", chainId: devnet.chain.id, verifyingContract: token },
      authorization,
    });
    await wait(
      await transferWithAuthorization(devnet.walletClient(relayer), { token, authorization, signature }),
    );
    expect(await balance(to, token)).toBe(1_250_000n);
    expect(await balance(payer.address, token)).toBe(3_750_000n);
  });
});
