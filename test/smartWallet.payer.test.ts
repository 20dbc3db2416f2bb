/**
 * Smart-contract wallet payers (ERC-1271) on Circle's USDC (FiatToken v2.2, whose `bytes signature`
 * EIP-3009 overloads ask a payer with code for `isValidSignature`): a wallet whose owner signs for it
 * pays a one-time 402, subscribes, opens and spends a channel, and reads its own payments back,
 * through the same client, gate and facilitator paths as an EOA.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { type Address, type Hex, recoverTypedDataAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/index.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { WALLET_READS } from "../src/facilitator/paymentReadBack.ts";
import { memoNonce } from "../src/protocol/memo.ts";
import { insertPayment } from "../src/facilitator/paymentRecords.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { readPaymentAsPayer } from "./support/readPayment.ts";
import {
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
  devnet = await startDevnet({ token: "usdc", accounts: 4 });
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
    for (let i = 0; i < WALLET_READS; i++) {
      expect((await readPaymentAsPayer(tf.url, row.nonce, asBurner)).status).toBe(404);
    }
    const limited = await readPaymentAsPayer(tf.url, row.nonce, asBurner);
    expect(limited.status).toBe(429);
    expect(await limited.json()).toMatchObject({ error: { code: "RateLimited" } });
  });
});
