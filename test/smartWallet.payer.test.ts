/**
 * Smart-contract wallet payers (ERC-1271) on Circle's USDC (FiatToken v2.2, whose `bytes signature`
 * EIP-3009 overloads ask a payer with code for `isValidSignature`): a wallet whose owner signs for it
 * pays a one-time 402, subscribes, opens and spends a channel, and reads its own payments back,
 * through the same client, gate and facilitator paths as an EOA.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import {
  type Address,
  createPublicClient,
  custom,
  type Hex,
  type LocalAccount,
  maxUint256,
  recoverTypedDataAddress,
} from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { getTokenBalance } from "../src/chain/index.ts";
import { transferWithAuthorizationTypes } from "../src/chain/signers/eip712Types.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { registerProvider } from "../src/client/registerProvider.ts";
import { type CheckablePayment, checkSignedPayment } from "../src/facilitator/checkSignedPayment.ts";
import { createContractSigners } from "../src/facilitator/contractSigners.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { WALLET_READS } from "../src/facilitator/paymentReadBack.ts";
import { insertPayment } from "../src/facilitator/paymentRecords.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import {
  type GateResult,
  type PaymentGate,
  type PaymentGateControls,
  paymentGate,
} from "../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { createFixedClock, unixSeconds } from "../src/protocol/clock.ts";
import { memoNonce } from "../src/protocol/memo.ts";
import {
  encodeSubAuthPayload,
  formatSubAuthToken,
  subAuthMessage,
} from "../src/protocol/subscriptionAuth.ts";
import { createChannelFetch } from "../src/schemes/channel/client/channelFetch.ts";
import { createChannelWallet } from "../src/schemes/channel/client/channelWallet.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  startChannelFacilitator,
} from "./support/channelFixtures.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { readPaymentAsPayer } from "./support/readPayment.ts";
import {
  approveCall,
  deployFixture,
  deploySmartWallet,
  gasBurningWallet,
  type SmartWallet,
  walletAccount,
} from "./support/smartWallet.ts";

let devnet: Devnet;
let usdc: Address;
let owner: DevnetAccount;
let wallet: SmartWallet;
let tf: TestFacilitator;

const balance = (address: Address) => getTokenBalance(devnet.publicClient, { token: usdc, owner: address });

beforeAll(async () => {
  devnet = await startDevnet({ token: "usdc", accounts: 7 });
  usdc = devnet.contracts.usd;
  owner = devnet.accounts[1]!;
  wallet = await deploySmartWallet(devnet, owner, { usd: 50_000_000n });
  tf = await startTestFacilitator(devnet);
});
afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

/** A gate selling `GET /api/report` for `price`, paid to a fresh address, in front of the facilitator. */
async function startGate(payTo: Address, price: string): Promise<RunningServer> {
  const gate = paymentGate({
    payTo,
    network: devnet.network,
    token: usdc,
    facilitator: tf.url,
    fetch,
    memoSecret: randomBytes(32),
    routes: { "GET /api/report": { price } },
  });
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.get("/api/report", (c) => c.json({ paidBy: c.get("payment")?.payer }));
  return serveApp(app);
}

describe("a smart-contract wallet payer", () => {
  it("signs with its owner's key: 65 bytes that recover to the owner, not to the wallet", async () => {
    const typed = {
      domain: { name: "x", version: "1", chainId: devnet.chain.id, verifyingContract: usdc },
      types: { M: [{ name: "v", type: "uint256" }] },
      primaryType: "M" as const,
      message: { v: 1n },
    };
    const signature: Hex = await wallet.account.signTypedData(typed);
    expect(signature).toMatch(/^0x[0-9a-f]{130}$/);
    expect(await recoverTypedDataAddress({ ...typed, signature })).toBe(owner.address);
    expect(wallet.account.address).toBe(wallet.address);
  });

  it("pays a one-time 402 through a gate and the facilitator, the USDC moving from the wallet", async () => {
    const payTo = devnet.accounts[3]!.address;
    const server = await startGate(payTo, "0.25");
    try {
      const buyer = createPayer({
        account: wallet.account,
        network: devnet.network,
        facilitator: tf.url,
        fetch,
      });
      const payeeBefore = await balance(payTo);
      const walletBefore = await balance(wallet.address);
      const response = await fetchWithPayment(fetch, buyer, { maxPrice: "1.00" })(`${server.url}/api/report`);
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ paidBy: wallet.address });
      expect(await balance(payTo)).toBe(payeeBefore + 250_000n);
      expect(await balance(wallet.address)).toBe(walletBefore - 250_000n);
    } finally {
      await server.close();
    }
  });
});

describe("a smart-contract wallet reading its payments back", () => {
  it("reads a payment it made, signing the read with its owner's key", async () => {
    const payTo = devnet.accounts[3]!.address;
    const server = await startGate(payTo, "0.10");
    try {
      const buyer = createPayer({
        account: wallet.account,
        network: devnet.network,
        facilitator: tf.url,
        fetch,
      });
      const { receipt } = await buyer.pay(`${server.url}/api/report`, { maxAmount: "1.00" });
      const nonce = memoNonce(receipt!.proof.memo);
      const response = await readPaymentAsPayer(tf.url, nonce, wallet.account);
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({
        payer: wallet.address,
        amount: "100000",
        status: "settled",
      });
      // Another key's signature in the wallet's name finds nothing.
      const stranger = walletAccount(wallet.address, devnet.accounts[2]!.account);
      expect((await readPaymentAsPayer(tf.url, nonce, stranger)).status).toBe(404);
      // Strangers spending the wallet's bucket of chain-checked reads do not lock its owner out: the
      // owner's key, accepted before, draws on a bucket of its own.
      for (let i = 0; i < 2 * WALLET_READS; i++) {
        const junk = await readPaymentAsPayer(
          tf.url,
          nonce,
          walletAccount(wallet.address, privateKeyToAccount(generatePrivateKey())),
        );
        expect([404, 429]).toContain(junk.status);
        await junk.body?.cancel();
      }
      expect((await readPaymentAsPayer(tf.url, nonce, wallet.account)).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("refuses a read that only a gas-burning isValidSignature would accept, and rate-limits a wallet's chain-checked reads", async () => {
    const burner = await deployFixture(devnet, owner, gasBurningWallet);
    const row = await insertPayment(tf.store, {
      nonce: `0x${randomBytes(32).toString("hex")}`,
      network: devnet.network,
      token: usdc,
      payer: burner,
      payTo: devnet.accounts[3]!.address,
      amount: 10_000n,
      source: "x402",
      memo: undefined,
      validAfter: 0n,
      validBefore: 4_000_000_000n,
      signature: `0x${"11".repeat(65)}`,
    });
    if (row === undefined) throw new Error("the nonce was taken");
    // Unbounded, the call would answer yes: the wallet accepts anything once it burnt 2 M gas.
    const hash = `0x${"00".repeat(32)}` as const;
    const unbounded = await devnet.publicClient.readContract({
      address: burner,
      abi: gasBurningWallet.abi,
      functionName: "isValidSignature",
      args: [hash, "0x"],
    });
    expect(unbounded).toBe("0x1626ba7e");
    const asBurner = walletAccount(burner, devnet.accounts[2]!.account);
    // Refused, never served; sent all at once, the reads past the wallet's allowance are 429 before
    // any chain read (the bucket refills one a second, far slower than these arrive).
    const statuses = await Promise.all(
      Array.from({ length: 2 * WALLET_READS }, async () => {
        const response = await readPaymentAsPayer(tf.url, row.nonce, asBurner);
        await response.body?.cancel();
        return response.status;
      }),
    );
    expect(statuses.every((status) => status === 404 || status === 429)).toBe(true);
    expect(statuses.filter((status) => status === 404).length).toBeGreaterThanOrEqual(1);
    expect(statuses.filter((status) => status === 429).length).toBeGreaterThanOrEqual(WALLET_READS / 2);
  });
});

describe("a smart-contract wallet paying through a channel", () => {
  const PRICE = 10_000n;

  it("opens a channel with its ERC-1271 ReceiveWithAuthorization, pays with vouchers the contract accepts, and has its close request relayed", async () => {
    const payee = devnet.accounts[4]!;
    const gas = devnet.accounts[5]!;
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const dir = mkdtempSync(join(tmpdir(), "tollgate-wallet-channel-"));
    const { facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: {
        claims: { thresholdValue: 1n, maxAgeMs: 3_600_000, intervalMs: 100 },
        minDeposit: 100_000n,
      },
      outbox: { reconcileIntervalMs: 100 },
    });
    const apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
    const gate = paymentGate({
      payTo: payee.address,
      network: devnet.network,
      token: { address: usdc, name: devnet.token.name, version: devnet.token.version },
      facilitator: server.url,
      providerApiKey: apiKey,
      memoSecret: randomBytes(32),
      routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
      schemeOptions: {
        channel: {
          contract: devnet.contracts.channels,
          journal: join(dir, "vouchers.journal"),
          forwardIntervalMs: 3_600_000,
        },
      },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => c.json({ paidWith: c.get("payment")?.scheme }));
    const api = await serveApp(app);
    try {
      const channelWallet = createChannelWallet({
        account: wallet.account,
        network: devnet.network,
        facilitator: createFacilitatorClient({ url: server.url, fetch }),
        calls: 20,
      });
      const paidFetch = createChannelFetch(fetch, { wallet: channelWallet, maxPrice: PRICE });
      const walletBefore = await balance(wallet.address);
      for (let i = 0; i < 5; i++) {
        const response = await paidFetch(`${api.url}/api/item`);
        expect(response.status).toBe(200);
        expect(await response.json()).toEqual({ paidWith: "channel" });
      }
      const [channel] = channelWallet.channels();
      expect(channel).toMatchObject({ status: "open", deposit: 20n * PRICE, signed: 5n * PRICE });
      const onOpen = await readChannel(devnet.publicClient, {
        channels: devnet.contracts.channels,
        channelId: channel!.channelId,
      });
      expect(onOpen.payer).toBe(wallet.address);
      expect(await balance(wallet.address)).toBe(walletBefore - 20n * PRICE);

      // The gate forwards its vouchers on shutdown; the facilitator claims them on chain.
      await gate.close();
      const read = () =>
        readChannel(devnet.publicClient, {
          channels: devnet.contracts.channels,
          channelId: channel!.channelId,
        });
      let claimed = await read();
      for (let waited = 0; claimed.claimed < 5n * PRICE && waited < 20_000; waited += 100) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        claimed = await read();
      }
      expect(claimed.claimed).toBe(5n * PRICE);

      // The close request is the wallet's EIP-712 signature (its owner's key), relayed as requestCloseFor.
      const outcome = await channelWallet.requestClose(channel!.channelId, { cooperative: false });
      expect(outcome.closeRequestedAt).toBeGreaterThan(0);
      expect(Number((await read()).closeRequestedAt)).toBe(outcome.closeRequestedAt);
    } finally {
      await api.close();
      await gate.close();
      await server.close();
      await facilitator.stop();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("a smart-contract wallet subscribing", () => {
  it("approves the SubscriptionManager through its own execute, subscribes gasless, and is served by a gate on its sub-auth token", async () => {
    const provider = devnet.accounts[4]!;
    const manager = devnet.contracts.subscriptionManager;
    const created = await createPlan(devnet.walletClient(provider), {
      manager,
      token: usdc,
      amount: 2_000_000n,
      interval: 30n * 86_400n,
      includedUnits: 0n,
      overageUnitPrice: 0n,
    });
    const planId = getPlanIdFromReceipt(
      await devnet.publicClient.waitForTransactionReceipt({ hash: created }),
    );
    await wallet.execute(usdc, approveCall(manager, maxUint256));

    const results: GateResult[] = [];
    let gate: (PaymentGate & PaymentGateControls) | undefined;
    const app = new Hono();
    app.use("/api/*", async (c, next) => {
      const result = await gate!(c.req.raw);
      results.push(result);
      if (result.kind === "respond") return result.response;
      await next();
    });
    app.get("/api/report", (c) => c.json({ report: "monthly" }));
    const api = await serveApp(app);
    try {
      const client = createFacilitatorClient({ url: tf.url, fetch });
      gate = paymentGate({
        payTo: provider.address,
        network: devnet.network,
        token: usdc,
        facilitator: tf.url,
        fetch,
        memoSecret: randomBytes(32),
        publicOrigin: api.url,
        providerApiKey: (await registerProvider(client, provider.account)).apiKey,
        subscriptionEventPollMs: 0,
        // The gate asks a wallet subscriber's isValidSignature about its sub-auth tokens.
        chainClient: devnet.publicClient,
        routes: { "GET /api/report": { pricing: [{ type: "subscription", plan: planId }] } },
      });
      await gate.ready();
      const buyer = createPayer({
        account: wallet.account,
        network: devnet.network,
        facilitator: tf.url,
        fetch,
      });
      const walletBefore = await balance(wallet.address);
      const subscriptionId = await buyer.subscribe({ planId });
      expect(await balance(wallet.address)).toBe(walletBefore - 2_000_000n);

      const headers = await buyer.subscriptionHeaders(subscriptionId, api.url);
      const response = await fetch(`${api.url}/api/report`, { headers });
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ report: "monthly" });
      expect(results.at(-1)).toMatchObject({
        kind: "pass",
        subscription: { subscriptionId, subscriber: wallet.address },
      });

      // A token signed by another key in the wallet's name is refused.
      const stranger = createPayer({
        account: walletAccount(wallet.address, devnet.accounts[2]!.account),
        network: devnet.network,
        facilitator: tf.url,
        fetch,
      });
      const forged = await fetch(`${api.url}/api/report`, {
        headers: await stranger.subscriptionHeaders(subscriptionId, api.url),
      });
      expect(forged.status).toBe(402);

      // Junk in the wallet's name, signed by fresh keys, spends the wallet's shared window of chain
      // checks (30 a minute); the owner's key, accepted before, has a window of its own, so the owner's
      // next token is still put to the wallet and served.
      const tokenBy = async (signer: LocalAccount, iat: number) => {
        const payload = encodeSubAuthPayload({
          sub: subscriptionId.toString(),
          aud: api.url,
          iat,
          exp: iat + 600,
        });
        const signature = await signer.signMessage({ message: subAuthMessage(payload) });
        return { ...headers, "X-Tollgate-Sub-Auth": formatSubAuthToken(payload, signature) };
      };
      const now = Math.floor(Date.now() / 1000);
      for (let i = 0; i < 31; i++) {
        const junk = await fetch(`${api.url}/api/report`, {
          headers: await tokenBy(privateKeyToAccount(generatePrivateKey()), now - 10),
        });
        expect(junk.status).toBe(402);
      }
      const next = await fetch(`${api.url}/api/report`, { headers: await tokenBy(owner.account, now - 5) });
      expect(next.status).toBe(200);
    } finally {
      await gate?.close();
      await api.close();
    }
  }, 60_000);
});

describe("the facilitator's chain reads for payers' signatures", () => {
  /** The facilitator's off-chain check of an x402-style payment, over a client that counts its RPC calls. */
  function checker() {
    const calls: string[] = [];
    const client = createPublicClient({
      chain: devnet.chain,
      transport: custom({
        request: async (args: { method: string; params?: unknown }) => {
          calls.push(args.method);
          return devnet.publicClient.request(args as never);
        },
      }),
    });
    const clock = createFixedClock(Date.now());
    const contractSigners = createContractSigners({ client, clock });
    const check = (payment: CheckablePayment) =>
      checkSignedPayment(
        {
          network: devnet.network,
          tokens: new Map([
            [
              usdc.toLowerCase(),
              { address: usdc, name: devnet.token.name, version: devnet.token.version, symbol: "USDC" },
            ],
          ]),
          nowSeconds: unixSeconds(clock),
          minRemainingSeconds: 6,
          contractSigners,
        },
        payment,
      );
    return { calls, clock, check };
  }

  async function signed(from: LocalAccount, signer: LocalAccount = from): Promise<CheckablePayment> {
    const now = BigInt(Math.floor(Date.now() / 1000));
    const authorization = {
      from: from.address,
      to: devnet.accounts[3]!.address,
      value: 10_000n,
      validAfter: now - 60n,
      validBefore: now + 600n,
      nonce: `0x${randomBytes(32).toString("hex")}` as Hex,
    };
    const signature = await signer.signTypedData({
      domain: {
        name: devnet.token.name,
        version: devnet.token.version,
        chainId: devnet.chain.id,
        verifyingContract: usdc,
      },
      types: transferWithAuthorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: authorization,
    });
    return {
      network: devnet.network,
      token: usdc,
      authorization: {
        ...authorization,
        value: authorization.value.toString(),
        validAfter: authorization.validAfter.toString(),
        validBefore: authorization.validBefore.toString(),
      },
      signature,
    };
  }

  it("reads nothing for an EOA's own signature, and asks a wallet once per signature behind a has-code cache", async () => {
    const { calls, clock, check } = checker();
    const eoa = devnet.accounts[2]!.account;
    expect(await check(await signed(eoa))).toBe(eoa.address);
    expect(calls).toEqual([]);

    expect(await check(await signed(wallet.account))).toBe(wallet.address);
    expect(calls).toEqual(["eth_getCode", "eth_call"]);
    calls.length = 0;
    // The same payment again: its verdict is cached. A new one: the code is, the signature is asked.
    const second = await signed(wallet.account);
    await check(second);
    await check(second);
    expect(calls).toEqual(["eth_call"]);
    calls.length = 0;

    // Another key signing in an EOA's name: one code read, then refused from the cache for 30 s.
    const forged = () => signed(walletAccount(eoa.address, devnet.accounts[1]!.account));
    await expect(check(await forged())).rejects.toMatchObject({ code: "InvalidSignature" });
    await expect(check(await forged())).rejects.toMatchObject({ code: "InvalidSignature" });
    expect(calls).toEqual(["eth_getCode"]);
    calls.length = 0;
    // An EOA may gain code (EIP-7702) at any time: "no code" is read again once its entry expires.
    clock.advance(31_000);
    await expect(check(await forged())).rejects.toMatchObject({ code: "InvalidSignature" });
    expect(calls).toEqual(["eth_getCode"]);
  });

  it("refuses a payment from a wallet whose isValidSignature needs more gas than the cap", async () => {
    const burner = await deployFixture(devnet, owner, gasBurningWallet);
    const { check } = checker();
    const payment = await signed(walletAccount(burner, devnet.accounts[2]!.account));
    await expect(check(payment)).rejects.toMatchObject({ code: "InvalidSignature" });
  });
});
