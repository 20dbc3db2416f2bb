/**
 * The minimum payment follows the network's fee (src/facilitator/abuse/settlementFeeFloor.ts): on a
 * devnet with an ETH price configured, a base-fee jump raises the minimum `/supported` publishes, a
 * payment that no longer covers its share is refused with nothing queued or sent, and one that does
 * settles. On an OP-stack devnet (`anvil --network optimism`) the GasPriceOracle's L1 data fee is part
 * of the cost, and a chain without the oracle's code falls back to the L2 gas alone.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { type Hex, parseGwei } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GAS_PRICE_ORACLE } from "../src/chain/actions/fees/getL1DataFee.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

/** Gas one batched item is counted at, and the terms these facilitators are configured with. */
const ITEM_GAS = 47_500n;
const ETH_PRICE_USD = 4_000n;
const SHARE_DENOMINATOR = 2n; // maxFeeShare 0.5

/** The minimum (USDC units) for `costWei` of settlement, computed here independently: ⌈cost × 2⌉. */
function expectedMinimum(costWei: bigint): bigint {
  const numerator = costWei * ETH_PRICE_USD * 10n ** 6n * SHARE_DENOMINATOR;
  const denominator = 10n ** 18n;
  return (numerator + denominator - 1n) / denominator;
}

type SupportedToken = {
  minAmount: string;
  minAmountFloor?: string;
  settlementCost?: { amount: string; maxFeeShare: string; blockNumber: string };
};

async function supportedToken(url: string): Promise<SupportedToken> {
  const body = (await (await fetch(`${url}/supported`)).json()) as {
    networks: { tokens: SupportedToken[] }[];
  };
  return body.networks[0]!.tokens[0]!;
}

async function post(url: string, body: unknown) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    body: (await response.json()) as { error?: { code: string; details?: Record<string, unknown> } },
  };
}

/** Asks `/x402/verify` whether a payment of `amount` passes every check (nothing is settled). */
async function x402Verify(devnet: Devnet, url: string, amount: bigint) {
  return (await x402Body(devnet, url, amount)).verify;
}

/** Verifies a payment of `amount` on `/x402/verify`; `settle()` then settles the same payment. */
async function x402Body(devnet: Devnet, url: string, amount: bigint) {
  const [payer, payee] = [devnet.accounts[1]!, devnet.accounts[2]!];
  const signed = await signTestPayment(devnet, payer, { payTo: payee.address, amount });
  const requirements = {
    scheme: "exact",
    network: devnet.network,
    amount: String(amount),
    asset: devnet.contracts.usd,
    payTo: payee.address,
    maxTimeoutSeconds: 600,
    extra: { name: devnet.token.name, version: devnet.token.version },
  };
  const verify = await post(`${url}/x402/verify`, {
    x402Version: 2,
    paymentPayload: {
      x402Version: 2,
      accepted: requirements,
      payload: { authorization: signed.authorization, signature: signed.signature },
    },
    paymentRequirements: requirements,
  });
  return {
    verify: verify.body as { isValid: boolean; invalidReason?: string; invalidMessage?: string },
    settle: () =>
      post(`${url}/x402/settle`, {
        x402Version: 2,
        paymentPayload: {
          x402Version: 2,
          accepted: requirements,
          payload: { authorization: signed.authorization, signature: signed.signature },
        },
        paymentRequirements: requirements,
      }),
  };
}

/** The base fee of the next block, mined at once; returns what settling one item costs at it, in wei. */
async function setBaseFee(devnet: Devnet, baseFeePerGas: bigint): Promise<bigint> {
  await devnet.testClient.setNextBlockBaseFeePerGas({ baseFeePerGas });
  await devnet.testClient.mine({ blocks: 1 });
  const block = await devnet.publicClient.getBlock({ blockTag: "latest" });
  expect(block.baseFeePerGas).toBe(baseFeePerGas);
  const priority = await devnet.publicClient.estimateMaxPriorityFeePerGas();
  return ITEM_GAS * (baseFeePerGas + priority);
}

describe("on a devnet whose base fee jumps", { timeout: 120_000 }, () => {
  let devnet: Devnet;
  let f: TestFacilitator;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 4 });
    f = await startTestFacilitator(devnet, {
      settlementFee: { ethPriceUsd: "4000", maxFeeShare: "0.5", maxAgeMs: 0 },
    });
  }, 60_000);

  afterAll(async () => {
    await f?.stop();
    await devnet?.stop();
  });

  const balance = (address: `0x${string}`) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: address });
  const gasNonce = () =>
    devnet.publicClient.getTransactionCount({
      address: devnet.accounts[devnet.accounts.length - 1]!.address,
    });

  it("raises the minimum, refuses a payment that no longer covers its share and settles one that does", async () => {
    const [payer, payee] = [devnet.accounts[1]!, devnet.accounts[2]!];
    const lowCost = await setBaseFee(devnet, parseGwei("0.001"));
    const low = await supportedToken(f.url);
    expect(low.minAmountFloor).toBe("1");
    expect(low.minAmount).toBe(String(expectedMinimum(lowCost)));
    expect(low.settlementCost?.maxFeeShare).toBe("0.5");

    // A price twice the minimum passes every check while the fee is low. (Asked without settling: the
    // gas key keeps its fee estimate for 3 s, which no real chain's base fee outruns fiftyfold.)
    const price = 2n * BigInt(low.minAmount);
    expect(await x402Verify(devnet, f.url, price)).toMatchObject({ isValid: true });

    // The base fee jumps fiftyfold: settling the same price would cost more than half of it.
    const highCost = await setBaseFee(devnet, parseGwei("50"));
    const high = await supportedToken(f.url);
    const minimum = expectedMinimum(highCost);
    expect(high.minAmount).toBe(String(minimum));
    expect(minimum).toBeGreaterThan(price);
    // The operator's gauges say the same.
    const metrics = await (await fetch(`${f.url}/metrics`)).text();
    expect(metrics).toContain(`tollgate_payment_minimum{token="${devnet.contracts.usd}"} ${minimum}`);
    expect(metrics).toContain(
      `tollgate_settlement_cost{token="${devnet.contracts.usd}"} ${high.settlementCost?.amount}`,
    );

    const nonceBefore = await gasNonce();
    const payeeBefore = await balance(payee.address);
    const payerBefore = await balance(payer.address);
    const refused = await post(`${f.url}/authorize`, {
      signedPayment: await signTestPayment(devnet, payer, { payTo: payee.address, amount: price }),
    });
    expect(refused.status).toBe(422);
    expect(refused.body.error).toMatchObject({
      code: "AmountMismatch",
      details: { reason: "settlement_cost_too_high", value: String(price), minimum: String(minimum) },
    });
    // Nothing queued, sent or moved.
    const rows = await f.store.query<{ n: string }>("SELECT count(*)::text AS n FROM payments");
    expect(rows[0]!.n).toBe("0");
    expect(await gasNonce()).toBe(nonceBefore);
    expect(await balance(payee.address)).toBe(payeeBefore);
    expect(await balance(payer.address)).toBe(payerBefore);

    // The minimum it names passes, and settles on chain.
    const settled = await post(`${f.url}/authorize`, {
      signedPayment: await signTestPayment(devnet, payer, { payTo: payee.address, amount: minimum }),
    });
    expect(settled.status, JSON.stringify(settled.body)).toBe(200);
    expect(await balance(payee.address)).toBe(payeeBefore + minimum);
    expect(await balance(payer.address)).toBe(payerBefore - minimum);
  });

  it("settles an x402 payment its verify admitted though the fee rose while the gate served it, and refuses the same price verified after", async () => {
    const [payer, payee] = [devnet.accounts[1]!, devnet.accounts[2]!];
    await setBaseFee(devnet, parseGwei("0.001"));
    const price = 2n * BigInt((await supportedToken(f.url)).minAmount);
    const verified = await x402Body(devnet, f.url, price);
    expect(verified.verify).toMatchObject({ isValid: true });

    // The gate runs its handler; meanwhile the base fee jumps fiftyfold.
    await setBaseFee(devnet, parseGwei("50"));
    expect(BigInt((await supportedToken(f.url)).minAmount)).toBeGreaterThan(price);
    expect(await x402Verify(devnet, f.url, price)).toMatchObject({ isValid: false });

    // The served payment is still settled: the provider is paid, once.
    const payeeBefore = await balance(payee.address);
    const payerBefore = await balance(payer.address);
    const settled = await verified.settle();
    expect(settled.status, JSON.stringify(settled.body)).toBe(200);
    expect(settled.body, JSON.stringify(settled.body)).toMatchObject({ success: true });
    expect(await balance(payee.address)).toBe(payeeBefore + price);
    expect(await balance(payer.address)).toBe(payerBefore - price);
  });

  it("is refused on the x402 endpoints alike, with x402's reason and the minimum in the message", async () => {
    await setBaseFee(devnet, parseGwei("50"));
    const minimum = BigInt((await supportedToken(f.url)).minAmount);
    const verify = await x402Verify(devnet, f.url, minimum / 2n);
    expect(verify).toMatchObject({
      isValid: false,
      invalidReason: "invalid_exact_evm_payload_authorization_value_mismatch",
    });
    expect(verify.invalidMessage).toMatch(/at least \d+(\.\d+)? USDC/);
  });

  it("lets a gate start during the spike, and refuses its payer per request with the minimum, serving nothing", async () => {
    await setBaseFee(devnet, parseGwei("50"));
    const minimum = BigInt((await supportedToken(f.url)).minAmount);
    const [buyer, seller] = [devnet.accounts[1]!, devnet.accounts[2]!];
    const gate = paymentGate({
      payTo: seller.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: f.url,
      fetch,
      memoSecret: randomBytes(32),
      routes: { "GET /api/report": { price: "0.01" } },
    });
    // 0.01 USDC is above the configured floor: refused only while the fee is this high, so no start-up error.
    await gate.ready();
    let served = 0;
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/report", (c) => {
      served++;
      return c.json({ report: true });
    });
    const server = await serveApp(app);
    try {
      const before = await balance(buyer.address);
      const payer = createPayer({
        account: buyer.account,
        network: devnet.network,
        facilitator: f.url,
        fetch,
      });
      const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "1.00" });
      await expect(paidFetch(`${server.url}/api/report`)).rejects.toMatchObject({
        code: "AmountMismatch",
        details: { reason: "settlement_cost_too_high", minimum: String(minimum) },
      });
      expect(served).toBe(0);
      expect(await balance(buyer.address)).toBe(before);
      // The gate itself is unharmed: it still answers 402 with its offer.
      expect((await fetch(`${server.url}/api/report`)).status).toBe(402);
    } finally {
      await server.close();
    }
  });
});
/**
 * A stand-in for the GasPriceOracle predeploy, which `anvil --network optimism` does not deploy: it
 * answers every call with storage slot 0 × the call's size, a data fee per byte as the real oracle's
 * pre-compression formula has it. `SLOAD(0) * CALLDATASIZE`, returned as one word.
 */
const STAND_IN_ORACLE: Hex = "0x600054360260005260206000f3";
/** The size of `getL1Fee(bytes)`'s call for one settlement item: selector, offset, length, 384 bytes. */
const ORACLE_CALL_BYTES = 4n + 32n + 32n + 384n;

describe("on an OP-stack devnet (anvil --network optimism)", { timeout: 120_000 }, () => {
  let devnet: Devnet;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 4, network: "optimism" });
  }, 60_000);

  afterAll(async () => {
    await devnet?.stop();
  });

  const start = () =>
    startTestFacilitator(devnet, { settlementFee: { ethPriceUsd: "4000", maxFeeShare: "0.5", maxAgeMs: 0 } });

  it("counts L2 gas alone where the chain has no GasPriceOracle", async () => {
    expect(await devnet.publicClient.getCode({ address: GAS_PRICE_ORACLE })).toBeUndefined();
    const f = await start();
    try {
      const l2Cost = await setBaseFee(devnet, parseGwei("0.001"));
      expect((await supportedToken(f.url)).minAmount).toBe(String(expectedMinimum(l2Cost)));
    } finally {
      await f.stop();
    }
  });

  it("adds the L1 data fee the oracle prices for one item's calldata, and refuses a payment that covers only the L2 gas", async () => {
    const perByte = 10n ** 12n; // 1 000 gwei per byte: the L1 fee dominates
    await devnet.testClient.setCode({ address: GAS_PRICE_ORACLE, bytecode: STAND_IN_ORACLE });
    await devnet.testClient.setStorageAt({
      address: GAS_PRICE_ORACLE,
      index: 0,
      value: `0x${perByte.toString(16).padStart(64, "0")}`,
    });
    const f = await start();
    try {
      const l2Cost = await setBaseFee(devnet, parseGwei("0.001"));
      const l1Fee = perByte * ORACLE_CALL_BYTES;
      const token = await supportedToken(f.url);
      expect(token.minAmount).toBe(String(expectedMinimum(l2Cost + l1Fee)));
      expect(BigInt(token.minAmount)).toBeGreaterThan(expectedMinimum(l2Cost));

      const [payer, payee] = [devnet.accounts[1]!, devnet.accounts[2]!];
      const refused = await post(`${f.url}/authorize`, {
        signedPayment: await signTestPayment(devnet, payer, {
          payTo: payee.address,
          amount: expectedMinimum(l2Cost) * 2n,
        }),
      });
      expect(refused.status).toBe(422);
      expect(refused.body.error?.details).toMatchObject({
        reason: "settlement_cost_too_high",
        minimum: token.minAmount,
      });
    } finally {
      await f.stop();
    }
  });
});
