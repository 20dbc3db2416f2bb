/**
 * x402 v2 compatibility of the facilitator (docs/x402.md), proven with the published x402 packages
 * against a real facilitator on a real devnet: `@x402/core`'s HTTP facilitator client calls
 * `/x402/supported`, `/x402/verify` and `/x402/settle`; then a standard x402 resource server
 * (`@x402/express` + `@x402/evm`'s exact server scheme) uses this facilitator and is paid by the
 * standard x402 client (`@x402/fetch` + `@x402/evm`'s exact client scheme with a viem account).
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { x402Client } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  HTTPFacilitatorClient,
} from "@x402/core/http";
import type { PaymentPayload, PaymentRequirements } from "@x402/core/types";
import { ExactEvmScheme as ExactEvmClientScheme } from "@x402/evm/exact/client";
import { ExactEvmScheme as ExactEvmServerScheme } from "@x402/evm/exact/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { wrapFetchWithPayment } from "@x402/fetch";
import express from "express";
import { type Address, erc20Abi, type Hash, type PrivateKeyAccount, parseEventLogs } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const NETWORK = "eip155:31337" as const;

let devnet: Devnet;
let tf: TestFacilitator;
let facilitator: HTTPFacilitatorClient;
let payTo: Address;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  facilitator = new HTTPFacilitatorClient({ url: `${tf.url}/x402` });
  payTo = devnet.accounts[2]!.address;
});

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

function balanceOf(owner: Address): Promise<bigint> {
  return getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
}

/** A fresh payer key holding `usd` test USD and no ETH: x402 payers never pay gas. */
async function freshPayer(usd: bigint): Promise<PrivateKeyAccount> {
  const account = privateKeyToAccount(generatePrivateKey());
  if (usd > 0n) await devnet.fund(account.address, { usd });
  return account;
}

function requirements(amount: bigint, overrides: Partial<PaymentRequirements> = {}): PaymentRequirements {
  return {
    scheme: "exact",
    network: NETWORK,
    amount: amount.toString(),
    asset: devnet.contracts.usd,
    payTo,
    maxTimeoutSeconds: 300,
    extra: { name: devnet.token.name, version: devnet.token.version },
    ...overrides,
  };
}

/** The payload the standard x402 client signs for these requirements. */
async function payloadFor(account: PrivateKeyAccount, offer: PaymentRequirements): Promise<PaymentPayload> {
  const client = new x402Client()
    .register(NETWORK, new ExactEvmClientScheme(account))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: offer.asset }] });
  return client.createPaymentPayload({
    x402Version: 2,
    resource: { url: "http://127.0.0.1/paid", description: "a paid resource", mimeType: "application/json" },
    accepts: [offer],
  });
}

describe("x402 facilitator client against /x402", () => {
  it("lists exact on eip155:31337 for x402 v2 with the facilitator's signer", async () => {
    const supported = await facilitator.getSupported();
    expect(supported.kinds).toEqual([{ x402Version: 2, scheme: "exact", network: NETWORK }]);
    expect(supported.extensions).toEqual([]);
    expect(supported.signers).toEqual({ "eip155:*": [devnet.accounts[devnet.accounts.length - 1]!.address] });
  });

  it("verifies a payload the x402 client signed, without moving money", async () => {
    const payer = await freshPayer(1_000_000n);
    const offer = requirements(250_000n);
    const result = await facilitator.verify(await payloadFor(payer, offer), offer);
    expect(result).toMatchObject({ isValid: true, payer: payer.address });
    expect(await balanceOf(payer.address)).toBe(1_000_000n);
  });

  it("refuses a payload signed by another key than its `from`", async () => {
    const payer = await freshPayer(1_000_000n);
    const forger = await freshPayer(0n);
    const offer = requirements(250_000n);
    const payload = await payloadFor(forger, offer);
    const authorization = payload.payload.authorization as Record<string, unknown>;
    const forged = {
      ...payload,
      payload: { ...payload.payload, authorization: { ...authorization, from: payer.address } },
    };
    const result = await facilitator.verify(forged, offer);
    expect(result).toMatchObject({
      isValid: false,
      invalidReason: "invalid_exact_evm_signature",
      payer: payer.address,
    });
  });

  it("refuses a payer whose balance is below the amount", async () => {
    const payer = await freshPayer(100_000n);
    const offer = requirements(250_000n);
    const result = await facilitator.verify(await payloadFor(payer, offer), offer);
    expect(result).toMatchObject({ isValid: false, invalidReason: "invalid_exact_evm_insufficient_balance" });
  });

  it("refuses a payload whose value is not the required amount", async () => {
    const payer = await freshPayer(1_000_000n);
    const payload = await payloadFor(payer, requirements(250_000n));
    const result = await facilitator.verify(payload, requirements(300_000n));
    expect(result).toMatchObject({
      isValid: false,
      invalidReason: "invalid_exact_evm_payload_authorization_value_mismatch",
    });
  });

  it("refuses a payee other than the authorization's `to`", async () => {
    const payer = await freshPayer(1_000_000n);
    const payload = await payloadFor(payer, requirements(250_000n));
    const result = await facilitator.verify(
      payload,
      requirements(250_000n, { payTo: devnet.accounts[3]!.address }),
    );
    expect(result).toMatchObject({ isValid: false, invalidReason: "invalid_exact_evm_recipient_mismatch" });
  });

  it("refuses, not fails, an asset or a network it does not settle", async () => {
    const payer = await freshPayer(1_000_000n);
    const otherAsset = requirements(250_000n, { asset: "0x1111111111111111111111111111111111111111" });
    expect(await facilitator.verify(await payloadFor(payer, otherAsset), otherAsset)).toMatchObject({
      isValid: false,
      invalidReason: "invalid_payment_requirements",
    });
    const otherNetwork = requirements(250_000n, { network: "eip155:8453" });
    const payload = await payloadFor(payer, requirements(250_000n));
    const moved = { ...payload, accepted: { ...payload.accepted, network: "eip155:8453" as const } };
    expect(await facilitator.verify(moved, otherNetwork)).toMatchObject({
      isValid: false,
      invalidReason: "invalid_network",
    });
    const settled = await facilitator.settle(moved, otherNetwork);
    expect(settled).toMatchObject({ success: false, errorReason: "invalid_network", transaction: "" });
  });

  it("settles once: balances move exactly once and only one settle of the payload is answered success", async () => {
    const payer = await freshPayer(1_000_000n);
    const offer = requirements(400_000n);
    const payload = await payloadFor(payer, offer);
    const before = await balanceOf(payTo);

    // A standard resource server keeps no replay guard, so a settlement is answered success once
    // (x402's own facilitator refuses the second transfer likewise); the copy learns the nonce is used.
    const replies = await Promise.all([
      facilitator.settle(payload, offer),
      facilitator.settle(payload, offer),
    ]);
    const a = replies.find((reply) => reply.success);
    expect(a).toMatchObject({ success: true, network: NETWORK, payer: payer.address });
    expect(a?.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(replies.find((reply) => !reply.success)).toMatchObject({
      success: false,
      errorReason: "invalid_exact_evm_nonce_already_used",
    });
    const again = await facilitator.settle(payload, offer);
    expect(again).toMatchObject({ success: false, errorReason: "invalid_exact_evm_nonce_already_used" });

    expect(await balanceOf(payer.address)).toBe(600_000n);
    expect(await balanceOf(payTo)).toBe(before + 400_000n);
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: a?.transaction as Hash });
    expect(receipt.status).toBe("success");
    // Settled through the engine's batch path, recorded as an x402 payment; the receipt still holds
    // the token's own Transfer of this payment.
    expect(receipt.to?.toLowerCase()).toBe(devnet.contracts.batchSettler.toLowerCase());
    const transfers = parseEventLogs({ abi: erc20Abi, eventName: "Transfer", logs: receipt.logs });
    expect(transfers.map((t) => ({ token: t.address.toLowerCase(), ...t.args }))).toContainEqual({
      token: devnet.contracts.usd.toLowerCase(),
      from: payer.address,
      to: payTo,
      value: 400_000n,
    });
    const nonce = (payload.payload.authorization as { nonce: string }).nonce;
    expect(await tf.facilitator.engine.getPayment(nonce)).toMatchObject({
      status: "settled",
      source: "x402",
    });

    // The spent authorization no longer verifies.
    expect(await facilitator.verify(payload, offer)).toMatchObject({
      isValid: false,
      invalidReason: "invalid_exact_evm_nonce_already_used",
    });
  });

  // 20 fundings one after another, then 20 settlements: ~3 s quiet; a loaded CI machine took > 30 s.
  it("settles concurrent x402 payments in shared batch transactions", { timeout: 90_000 }, async () => {
    const payers: PrivateKeyAccount[] = [];
    // Funding goes out one transaction at a time from the deployer's key.
    for (let i = 0; i < 20; i++) payers.push(await freshPayer(100_000n));
    const offer = requirements(100_000n);
    const payloads = await Promise.all(payers.map((p) => payloadFor(p, offer)));
    const before = await balanceOf(payTo);
    const results = await Promise.all(payloads.map((p) => facilitator.settle(p, offer)));
    expect(results.every((r) => r.success)).toBe(true);
    const transactions = new Set(results.map((r) => r.transaction));
    expect(transactions.size).toBeLessThan(payloads.length);
    expect(await balanceOf(payTo)).toBe(before + 20n * 100_000n);
  });
});

describe("standard x402 resource server and client over this facilitator", () => {
  const price = 10_000n;
  let server: Server;
  let origin: string;

  beforeAll(async () => {
    const resourceServer = new x402ResourceServer(facilitator).register(NETWORK, new ExactEvmServerScheme());
    const priced = (extra: Record<string, unknown> = {}) => ({
      scheme: "exact" as const,
      network: NETWORK,
      payTo,
      price: {
        amount: price.toString(),
        asset: devnet.contracts.usd,
        extra: { name: devnet.token.name, version: devnet.token.version, ...extra },
      },
      maxTimeoutSeconds: 120,
    });
    const app = express();
    app.use(
      paymentMiddleware(
        {
          // x402's default flow for EIP-3009: verify, run the handler, then settle.
          "GET /weather": { accepts: priced(), description: "today's weather", mimeType: "application/json" },
          // Settle before the handler runs, as Tollgate's own gate does.
          "GET /report": { accepts: priced({ paymentFlow: "upfront" }), description: "a report" },
        },
        resourceServer,
      ),
    );
    app.get("/weather", (_req, res) => {
      res.json({ forecast: "sunny" });
    });
    app.get("/report", (_req, res) => {
      res.json({ report: "all well" });
    });
    server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, "127.0.0.1", () => resolve(s));
    });
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  });

  function payingFetch(payer: PrivateKeyAccount) {
    // x402 v2 clients refuse assets they do not know (a devnet token) until they are allowed.
    const client = new x402Client()
      .register(NETWORK, new ExactEvmClientScheme(payer))
      .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: devnet.contracts.usd }] });
    return wrapFetchWithPayment(fetch, client);
  }

  async function expectSettledThroughUs(receiptHeader: string | null, payer: PrivateKeyAccount) {
    const receipt = decodePaymentResponseHeader(receiptHeader ?? "");
    expect(receipt).toMatchObject({ success: true, network: NETWORK, payer: payer.address });
    const onChain = await devnet.publicClient.getTransactionReceipt({ hash: receipt.transaction as Hash });
    expect(onChain.status).toBe("success");
    expect(onChain.to?.toLowerCase()).toBe(devnet.contracts.batchSettler.toLowerCase());
  }

  it("serves a paid route to @x402/fetch through @x402/express, settled on the devnet", async () => {
    const unpaid = await fetch(`${origin}/weather`);
    expect(unpaid.status).toBe(402);
    const offered = decodePaymentRequiredHeader(unpaid.headers.get("PAYMENT-REQUIRED") ?? "");
    expect(offered.accepts).toEqual([requirements(price, { maxTimeoutSeconds: 120 })]);

    const payer = await freshPayer(50_000n);
    const before = await balanceOf(payTo);
    const paid = await payingFetch(payer)(`${origin}/weather`);
    expect(paid.status).toBe(200);
    expect(await paid.json()).toEqual({ forecast: "sunny" });
    await expectSettledThroughUs(paid.headers.get("PAYMENT-RESPONSE"), payer);
    expect(await balanceOf(payer.address)).toBe(50_000n - price);
    expect(await balanceOf(payTo)).toBe(before + price);
  });

  it("serves a route that settles before its handler (x402's upfront flow)", async () => {
    const payer = await freshPayer(50_000n);
    const before = await balanceOf(payTo);
    const paid = await payingFetch(payer)(`${origin}/report`);
    expect(paid.status).toBe(200);
    expect(await paid.json()).toEqual({ report: "all well" });
    await expectSettledThroughUs(paid.headers.get("PAYMENT-RESPONSE"), payer);
    expect(await balanceOf(payer.address)).toBe(50_000n - price);
    expect(await balanceOf(payTo)).toBe(before + price);
  });

  it("does not serve a payer without the funds, and moves nothing", async () => {
    const payer = await freshPayer(price - 1n);
    const before = await balanceOf(payTo);
    const refused = await payingFetch(payer)(`${origin}/weather`);
    expect(refused.status).toBe(402);
    const offered = decodePaymentRequiredHeader(refused.headers.get("PAYMENT-REQUIRED") ?? "");
    expect(offered.error).toBe("invalid_exact_evm_insufficient_balance");
    expect(await balanceOf(payer.address)).toBe(price - 1n);
    expect(await balanceOf(payTo)).toBe(before);
  });
});
