import pino from "pino";
import type { Address } from "viem";
import { describe, expect, it } from "vitest";
import { createFixedClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import {
  createSettlementFeeFloor,
  parseFeeShare,
  parseUsdPrice,
  SETTLE_AFTER_VERIFY_GRACE_MS,
  SETTLEMENT_ITEM_GAS,
  type SettlementFeeFloorClient,
  settlementFeeMinimum,
  supportedNow,
} from "./settlementFeeFloor.ts";

const USDC: Address = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const GWEI = 1_000_000_000n;

/** A node answering with the base fee, priority fee and L1 fee it is set to; counts its reads. */
function chain(state: {
  baseFee: bigint;
  priority?: bigint;
  l1Fee?: bigint | "revert";
  fail?: boolean;
  hang?: boolean;
}) {
  const calls: string[] = [];
  const client: SettlementFeeFloorClient = {
    getBlock: (async () => {
      calls.push("getBlock");
      if (state.hang === true) await new Promise(() => undefined);
      if (state.fail === true) throw new Error("connection refused");
      return { number: 7n, baseFeePerGas: state.baseFee };
    }) as never,
    estimateMaxPriorityFeePerGas: (async () => {
      calls.push("priority");
      return state.priority ?? 0n;
    }) as never,
    getCode: (async () => {
      calls.push("getCode");
      return state.l1Fee === undefined ? undefined : "0x6000";
    }) as never,
    readContract: (async () => {
      calls.push("getL1Fee");
      if (state.l1Fee === "revert") throw new Error("execution reverted");
      return state.l1Fee;
    }) as never,
  };
  return { client, calls };
}

function floorOver(
  client: SettlementFeeFloorClient,
  options: { maxAgeMs?: number; minAmount?: bigint; maxFeePerGas?: bigint } = {},
) {
  const clock = createFixedClock(1_800_000_000_000);
  const floor = createSettlementFeeFloor({
    client,
    tokens: [{ address: USDC, decimals: 6, symbol: "USDC", minAmount: options.minAmount ?? 10_000n }],
    maxFeeShare: "0.5",
    ethPriceUsd: "4000",
    maxAgeMs: options.maxAgeMs ?? 6_000,
    maxFeePerGas: options.maxFeePerGas,
    clock,
    logger: pino({ level: "silent" }),
  });
  return { floor, clock };
}

describe("settlementFeeMinimum", () => {
  it("converts a batched item's gas to USDC at the ETH price and divides by the share, rounding up", () => {
    // 47 500 gas at 0.01 gwei = 4.75e-7 ETH = 0.0019 USD at 4 000 USD → 1 900 units; half of 3 800.
    const costWei = SETTLEMENT_ITEM_GAS * (GWEI / 100n);
    const terms = { decimals: 6, ethPriceMicroUsd: parseUsdPrice("4000"), sharePpm: parseFeeShare("0.5") };
    expect(settlementFeeMinimum({ costWei, blockNumber: 1n }, terms)).toEqual({
      settlementCost: 1_900n,
      minimum: 3_800n,
      blockNumber: 1n,
    });
    // One wei more rounds both up.
    expect(settlementFeeMinimum({ costWei: costWei + 1n, blockNumber: 1n }, terms)).toMatchObject({
      settlementCost: 1_901n,
      minimum: 3_801n,
    });
    // Free gas still asks for the smallest payment that moves money.
    expect(settlementFeeMinimum({ costWei: 0n, blockNumber: 1n }, terms).minimum).toBe(1n);
  });

  it("reads shares and prices as exact decimals and refuses nonsense", () => {
    expect(parseFeeShare("0.2")).toBe(200_000n);
    expect(parseFeeShare("1")).toBe(1_000_000n);
    expect(parseUsdPrice("3999.5")).toBe(3_999_500_000n);
    for (const bad of ["0", "1.5", "-0.1", "abc", "0.1234567", ""]) {
      expect(() => parseFeeShare(bad), bad).toThrow(TollgateError);
    }
    for (const bad of ["0", "-1", "1e3", "four thousand", ""]) {
      expect(() => parseUsdPrice(bad), bad).toThrow(TollgateError);
    }
  });
});

describe("createSettlementFeeFloor", () => {
  it("keeps the configured minimum while the fee is low, and raises it when the base fee jumps", async () => {
    const state = { baseFee: GWEI / 100n };
    const { floor, clock } = floorOver(chain(state).client);
    await floor.refresh();
    expect(floor.minimumOf(USDC)).toBe(10_000n);
    // 100× the fee: 0.19 USD per item, so at least 0.38 USDC.
    state.baseFee = GWEI;
    clock.advance(6_000);
    await floor.refresh();
    expect(floor.feeMinimumOf(USDC)).toMatchObject({ settlementCost: 190_000n, minimum: 380_000n });
    expect(floor.minimumOf(USDC.toLowerCase())).toBe(380_000n);
  });

  it("counts gas at most at the outbox's fee ceiling: no transaction pays more, so a spike above it raises the minimum no further", async () => {
    const { floor } = floorOver(chain({ baseFee: 100n * GWEI }).client, { maxFeePerGas: GWEI });
    await floor.refresh();
    expect(floor.minimumOf(USDC)).toBe(380_000n);
  });

  it("reads the chain at most once per maxAgeMs, and once for callers asking together; never at rest", async () => {
    const { client, calls } = chain({ baseFee: GWEI });
    const { floor, clock } = floorOver(client);
    expect(calls).toEqual([]);
    await Promise.all([floor.refresh(), floor.refresh(), floor.refresh()]);
    await floor.refresh();
    expect(calls.filter((c) => c === "getBlock")).toHaveLength(1);
    clock.advance(5_999);
    await floor.refresh();
    expect(calls.filter((c) => c === "getBlock")).toHaveLength(1);
    clock.advance(1);
    await floor.refresh();
    expect(calls.filter((c) => c === "getBlock")).toHaveLength(2);
    // The oracle's presence is asked once.
    expect(calls.filter((c) => c === "getCode")).toHaveLength(1);
  });

  it("adds the GasPriceOracle's L1 data fee where the chain has one, and counts L2 gas alone where it reverts", async () => {
    const state: { baseFee: bigint; l1Fee: bigint | "revert" } = { baseFee: 0n, l1Fee: 10n ** 12n };
    const { client, calls } = chain(state);
    const { floor, clock } = floorOver(client, { maxAgeMs: 0 });
    await floor.refresh();
    expect(calls).toContain("getL1Fee");
    // 10^-6 ETH at 4 000 USD = 0.004 USD.
    expect(floor.feeMinimumOf(USDC)).toMatchObject({ settlementCost: 4_000n, minimum: 8_000n });
    state.l1Fee = "revert";
    clock.advance(1);
    await floor.refresh();
    expect(floor.reading()?.l1Fee).toBe(0n);
  });

  it("keeps the last reading when the node cannot be reached, and refuses nothing before any", async () => {
    const state = { baseFee: GWEI, fail: true };
    const { floor, clock } = floorOver(chain(state).client, { maxAgeMs: 0 });
    await floor.refresh();
    expect(floor.feeMinimumOf(USDC)).toBeUndefined();
    expect(floor.minimumOf(USDC)).toBe(10_000n);
    expect(() => floor.assertCovers(USDC, 10_000n)).not.toThrow();
    state.fail = false;
    await floor.refresh();
    state.fail = true;
    clock.advance(60_000);
    await floor.refresh();
    expect(floor.minimumOf(USDC)).toBe(380_000n);
  });
});

describe("assertCovers", () => {
  it("refuses a payment worth less than its settlement at the share with 422 and the minimum that would pass", async () => {
    const { floor } = floorOver(chain({ baseFee: GWEI }).client);
    await floor.refresh();
    let refused: unknown;
    try {
      floor.assertCovers(USDC, 379_999n);
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(TollgateError);
    expect((refused as TollgateError).status).toBe(422);
    expect(refused).toMatchObject({
      code: "AmountMismatch",
      details: {
        reason: "settlement_cost_too_high",
        value: "379999",
        minimum: "380000",
        settlementCost: "190000",
        maxFeeShare: "0.5",
      },
    });
    expect((refused as Error).message).toMatch(/at least 0\.38 USDC/);
    expect(() => floor.assertCovers(USDC, 380_000n)).not.toThrow();
  });

  it("settles at the fee of the last two minutes when asked for a grace (x402's settle after its verify), never further back", async () => {
    const state = { baseFee: GWEI };
    const { floor, clock } = floorOver(chain(state).client);
    await floor.refresh(); // minimum 0.38 USDC: a 0.40 payment is verified
    floor.assertCovers(USDC, 400_000n);
    // The fee doubles while the gate serves: the verified payment is settled, a new one refused.
    state.baseFee = 2n * GWEI;
    clock.advance(30_000);
    await floor.refresh();
    expect(() => floor.assertCovers(USDC, 400_000n)).toThrow(/at least 0\.76 USDC/);
    expect(() => floor.assertCovers(USDC, 400_000n, { graceMs: SETTLE_AFTER_VERIFY_GRACE_MS })).not.toThrow();
    // No grace past SETTLE_AFTER_VERIFY_GRACE_MS, whatever is asked.
    clock.advance(SETTLE_AFTER_VERIFY_GRACE_MS);
    await floor.refresh();
    expect(() => floor.assertCovers(USDC, 400_000n, { graceMs: 10 * SETTLE_AFTER_VERIFY_GRACE_MS })).toThrow(
      /settlement_cost_too_high|at least/,
    );
  });
});

describe("supportedNow", () => {
  const supported = {
    version: "1" as const,
    schemes: ["exact" as const],
    networks: [
      {
        network: "eip155:8453" as const,
        tokens: [
          {
            address: USDC,
            symbol: "USDC",
            decimals: 6,
            eip712: { name: "USD Coin", version: "2" },
            minAmount: "10000",
            minAmountFloor: "10000",
          },
        ],
      },
    ],
  };

  it("publishes the minimum in force and the cost behind it, and the last reading when the node hangs", async () => {
    const state = { baseFee: GWEI, hang: false };
    const { floor, clock } = floorOver(chain(state).client);
    const now = await supportedNow(supported, floor);
    expect(now.networks[0]!.tokens[0]).toMatchObject({
      minAmount: "380000",
      minAmountFloor: "10000",
      settlementCost: { amount: "190000", maxFeeShare: "0.5", blockNumber: "7" },
    });
    // A node that no longer answers delays the answer by the wait, not forever.
    state.hang = true;
    clock.advance(60_000);
    const stale = await supportedNow(supported, floor, 10);
    expect(stale.networks[0]!.tokens[0]!.minAmount).toBe("380000");
  });
});
