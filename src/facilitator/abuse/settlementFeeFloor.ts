/**
 * The minimum payment that follows the network's fee: a payment whose settlement would cost the
 * facilitator more than `maxFeeShare` of its value is refused. The configured minimum
 * (minimumAmount.ts, `TOLLGATE_MIN_AMOUNT`) stays a floor under it; this raises the minimum when gas
 * gets dear and lets it fall back when gas is cheap again.
 *
 * What one payment costs: its item in a shared batch, `SETTLEMENT_ITEM_GAS` at the latest block's base
 * fee plus the priority fee the gas key offers, and on an OP-stack chain (a GasPriceOracle at
 * 0x42…0F) the L1 data fee of the item's calldata. The facilitator pays in ETH and the payment is in a
 * USD token, so the wei are converted at `ethPriceUsd`, a configured rate: no price feed is read, and
 * the token is taken to be worth one USD.
 *
 * Invariants:
 * - Nothing is polled: the chain is read when a payment or `GET /supported` needs the minimum and the
 *   last reading is older than `maxAgeMs`, one read at a time, so a facilitator at rest makes no call
 *   and a flood of requests makes at most one read per `maxAgeMs`.
 * - A failed read never refuses a payment by itself: the last reading stays in force (or, before any,
 *   the configured minimum alone), and the simulation that follows meets the same outage.
 * - All arithmetic is in bigint; the minimum is rounded up, so the refused share is never understated.
 */
import type { Logger } from "pino";
import {
  type Address,
  encodeAbiParameters,
  formatUnits,
  keccak256,
  type PublicClient,
  parseUnits,
  toHex,
} from "viem";
import { getL1DataFee, hasGasPriceOracle } from "../../chain/actions/fees/getL1DataFee.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import type { Clock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { SupportedResponse } from "../../protocol/facilitator.ts";

/**
 * Gas one payment adds to a batched settlement on USDC (FiatToken v2.2), measured by bench/gas.ts:
 * 47 455 per item in a batch of 100 distinct payers (docs/contracts.md). A payment settled alone costs
 * more (~80 000 with the transaction's own 21 000), but a facilitator under the load where fees matter
 * settles in batches, and the configured minimum covers the lone case at ordinary fees.
 */
export const SETTLEMENT_ITEM_GAS = 47_500n;

/**
 * Default largest share of a payment's value its settlement may cost: one half. The facilitator takes
 * no cut, so this is not a margin but a guard against a spike: at ordinary Base fees the configured
 * 0.01 USDC minimum binds (a batched item costs ~0.002 USD at 0.01 gwei), and a 0.01 USDC payment stays
 * settleable up to about twice that gas price; a fee that rises tenfold refuses what would cost more
 * than half its value instead of settling it at a loss. A smaller share (0.2) would move the minimum
 * above 0.01 USDC on ordinary days and refuse gates priced at it.
 */
export const DEFAULT_MAX_FEE_SHARE = "0.5";

/**
 * Default ETH price, USD: deliberately above where ETH has traded, so that a forgotten setting
 * overstates what gas costs (a minimum a little high) rather than understating it (payments settled at a
 * loss). Set `TOLLGATE_ETH_PRICE_USD` to the current price.
 */
export const DEFAULT_ETH_PRICE_USD = "5000";

/**
 * How far back `assertCovers` looks for the lowest fee when asked for a grace (x402's settle after its
 * verify): the gate runs its handler between the two, so a payment the fee admitted at verify is not
 * refused at settle, after it was served, because the fee rose meanwhile. The cost is bounded: at most
 * the rise of two minutes on such payments.
 */
export const SETTLE_AFTER_VERIFY_GRACE_MS = 120_000;

/** Default age after which a reading is read again when asked for (three Base blocks). */
export const DEFAULT_FEE_MAX_AGE_MS = 6_000;

/** Parts per million: the share's precision. */
const PPM = 1_000_000n;
/** Micro-USD per USD: the ETH price's precision. */
const MICRO = 1_000_000n;
const WEI_PER_ETH = 10n ** 18n;

/** Exact decimal text of a share in (0, 1], as parts per million; throws `InvalidRequest` otherwise. */
export function parseFeeShare(text: string): bigint {
  if (!/^\d+(\.\d{1,6})?$/.test(text)) {
    throw new TollgateError("InvalidRequest", `max fee share "${text}" is not a decimal such as 0.5`, {
      details: { maxFeeShare: text },
    });
  }
  const ppm = parseUnits(text, 6);
  if (ppm <= 0n || ppm > PPM) {
    throw new TollgateError("InvalidRequest", "max fee share must be above 0 and at most 1", {
      details: { maxFeeShare: text },
    });
  }
  return ppm;
}

/** Exact decimal text of a positive USD price (at most 6 decimals), as micro-USD. */
export function parseUsdPrice(text: string): bigint {
  if (!/^\d{1,12}(\.\d{1,6})?$/.test(text) || parseUnits(text, 6) <= 0n) {
    throw new TollgateError(
      "InvalidRequest",
      `ETH price "${text}" is not a positive USD amount such as 4000`,
      {
        details: { ethPriceUsd: text },
      },
    );
  }
  return parseUnits(text, 6);
}

/** One reading of the chain's fee: what settling one batched payment costs, in wei. */
export type FeeReading = {
  blockNumber: bigint;
  baseFeePerGas: bigint;
  priorityFeePerGas: bigint;
  /** The L1 data fee of one item's calldata (0 off OP-stack chains). */
  l1Fee: bigint;
  /** `SETTLEMENT_ITEM_GAS × min(baseFee + priorityFee, maxFeePerGas) + l1Fee`. */
  costWei: bigint;
};

/** What a reading means for a token: the cost of settling one payment and the fee-driven minimum. */
export type FeeMinimum = {
  /** What settling one batched payment costs now, in the token's smallest unit (rounded up). */
  settlementCost: bigint;
  /** The smallest value whose share `maxFeeShare` covers that cost (rounded up; at least 1). */
  minimum: bigint;
  blockNumber: bigint;
};

/** `costWei` in a USD token of `decimals` at `ethPriceMicroUsd`, and the value `sharePpm` of which it is. */
export function settlementFeeMinimum(
  reading: Pick<FeeReading, "costWei" | "blockNumber">,
  terms: { decimals: number; ethPriceMicroUsd: bigint; sharePpm: bigint },
): FeeMinimum {
  // cost (units) = wei × µUSD/ETH × 10^decimals / (10^18 wei/ETH × 10^6 µUSD/USD)
  const numerator = reading.costWei * terms.ethPriceMicroUsd * 10n ** BigInt(terms.decimals);
  const denominator = WEI_PER_ETH * MICRO;
  const settlementCost = ceilDiv(numerator, denominator);
  // One rounding for the minimum, from the exact cost: value × share ≥ cost.
  const minimum = ceilDiv(numerator * PPM, denominator * terms.sharePpm);
  return { settlementCost, minimum: minimum < 1n ? 1n : minimum, blockNumber: reading.blockNumber };
}

function ceilDiv(a: bigint, b: bigint): bigint {
  return (a + b - 1n) / b;
}

/**
 * A settlement item's calldata as BatchSettler's `settle` carries it (one element of its array): what
 * the L1 data fee is asked for. Its words are filled with hash output, so compression finds no more in
 * it than in a real authorization's nonce and signature.
 */
const SAMPLE_ITEM: `0x${string}` = (() => {
  const word = (label: string) => keccak256(toHex(`tollgate settlement item ${label}`));
  const address = (label: string) => `0x${word(label).slice(26)}` as Address;
  return encodeAbiParameters(
    [
      {
        type: "tuple",
        components: [
          { name: "from", type: "address" },
          { name: "to", type: "address" },
          { name: "value", type: "uint256" },
          { name: "validAfter", type: "uint256" },
          { name: "validBefore", type: "uint256" },
          { name: "nonce", type: "bytes32" },
          { name: "signature", type: "bytes" },
        ],
      },
    ],
    [
      {
        from: address("from"),
        to: address("to"),
        value: 12_345_678n,
        validAfter: 1_800_000_000n,
        validBefore: 1_800_000_600n,
        nonce: word("nonce"),
        signature: `${word("r")}${word("s").slice(2)}1b`,
      },
    ],
  );
})();

export type SettlementFeeFloorClient = Pick<
  PublicClient,
  "getBlock" | "getCode" | "readContract" | "estimateMaxPriorityFeePerGas"
>;

export type SettlementFeeFloorOptions = {
  client: SettlementFeeFloorClient;
  /** The tokens served, with their decimals and configured minimum (the floor under the fee's). */
  tokens: readonly { address: Address; decimals: number; symbol: string; minAmount: bigint }[];
  /** Largest share of a payment's value its settlement may cost, decimal text in (0, 1] (default 0.5). */
  maxFeeShare?: string | undefined;
  /** ETH in USD, decimal text (default 5000). */
  ethPriceUsd?: string | undefined;
  /**
   * The outbox's ceiling on `maxFeePerGas` (TOLLGATE_MAX_FEE_GWEI), if any: no transaction pays more per
   * gas, so the cost is counted at most at it (a payment accepted above it waits for the fee to fall).
   */
  maxFeePerGas?: bigint | undefined;
  /** Told each token's minimum in force and settlement cost after every reading (the metrics). */
  onReading?: ((token: Address, minimum: bigint, settlementCost: bigint) => void) | undefined;
  /** Age after which a reading is read again when asked for (default 6 000 ms; 0: every time). */
  maxAgeMs?: number | undefined;
  clock: Clock;
  logger: Logger;
};

export type SettlementFeeFloor = {
  /** The share as configured (decimal text), for `/supported` and error details. */
  readonly maxFeeShare: string;
  /**
   * Reads the chain's fee when the last reading is older than `maxAgeMs` (one read at a time; callers
   * meanwhile share it). Never throws: a failed read keeps the last reading.
   */
  refresh(): Promise<void>;
  /** The fee-driven minimum of a token (address, any case) from the last reading; none before it. */
  feeMinimumOf(token: string): FeeMinimum | undefined;
  /** The minimum in force for a token: its configured one, or the fee's when that is higher. */
  minimumOf(token: string): bigint;
  /**
   * Refuses a payment whose value does not cover its settlement at the share: 422 `AmountMismatch` with
   * `details.reason = "settlement_cost_too_high"` and the `minimum` that would pass now. Reads nothing:
   * `refresh` first. With `graceMs`, the cheapest reading of that last stretch decides (a payment
   * verified then is settled now, at most SETTLE_AFTER_VERIFY_GRACE_MS back).
   */
  assertCovers(token: string, value: bigint, options?: { graceMs?: number | undefined }): void;
  /** The last reading, for logs and tests. */
  reading(): FeeReading | undefined;
};

/**
 * @example
 * const floor = createSettlementFeeFloor({ client, tokens, maxFeeShare: "0.5", ethPriceUsd: "4000", clock, logger });
 * await floor.refresh();
 * floor.minimumOf(usdc); // 10000n at ordinary Base fees, more when gas is dear
 */
export function createSettlementFeeFloor(options: SettlementFeeFloorOptions): SettlementFeeFloor {
  const floor = floorState(options);
  return {
    maxFeeShare: floor.maxFeeShare,
    refresh: () => refresh(floor),
    feeMinimumOf: (token) => feeMinimumOf(floor, token),
    minimumOf: (token) => minimumOf(floor, token),
    assertCovers: (token, value, assertOptions) => assertCovers(floor, token, value, assertOptions),
    reading: () => floor.last,
  };
}

type FloorToken = SettlementFeeFloorOptions["tokens"][number];
type TimedReading = FeeReading & { at: number };

/** One floor: its settings, parsed once, and what it has read of the chain so far. */
type FloorState = {
  client: SettlementFeeFloorClient;
  clock: Clock;
  log: Logger;
  maxFeeShare: string;
  sharePpm: bigint;
  ethPriceMicroUsd: bigint;
  maxAgeMs: number;
  maxFeePerGas: bigint | undefined;
  onReading: SettlementFeeFloorOptions["onReading"];
  /** By lower-case address. */
  tokens: Map<string, FloorToken>;
  last: TimedReading | undefined;
  /** The readings of the last SETTLE_AFTER_VERIFY_GRACE_MS, oldest first (one per `maxAgeMs` at most). */
  recent: TimedReading[];
  inFlight: Promise<void> | undefined;
  /** Whether the chain has a GasPriceOracle: asked once (a predeploy does not come or go). */
  oracle: Promise<boolean> | undefined;
  failing: boolean;
  oracleFailing: boolean;
  /** Tokens whose minimum the fee raised above the configured one at the last reading. */
  raised: Set<string>;
};

/** The options checked and parsed (a bad share or price throws here), nothing read yet. */
function floorState(options: SettlementFeeFloorOptions): FloorState {
  const maxFeeShare = options.maxFeeShare ?? DEFAULT_MAX_FEE_SHARE;
  const sharePpm = parseFeeShare(maxFeeShare);
  const ethPriceMicroUsd = parseUsdPrice(options.ethPriceUsd ?? DEFAULT_ETH_PRICE_USD);
  return {
    client: options.client,
    clock: options.clock,
    log: options.logger.child({ component: "fee-floor" }),
    maxFeeShare,
    sharePpm,
    ethPriceMicroUsd,
    maxAgeMs: options.maxAgeMs ?? DEFAULT_FEE_MAX_AGE_MS,
    maxFeePerGas: options.maxFeePerGas,
    onReading: options.onReading,
    tokens: new Map(options.tokens.map((t) => [t.address.toLowerCase(), t])),
    last: undefined,
    recent: [],
    inFlight: undefined,
    oracle: undefined,
    failing: false,
    oracleFailing: false,
    raised: new Set(),
  };
}

function refresh(floor: FloorState): Promise<void> {
  const { last, maxAgeMs } = floor;
  if (last !== undefined && floor.clock.now() - last.at < maxAgeMs && maxAgeMs > 0) return Promise.resolve();
  floor.inFlight ??= read(floor).finally(() => {
    floor.inFlight = undefined;
  });
  return floor.inFlight;
}

async function l1FeeOf(floor: FloorState): Promise<bigint> {
  floor.oracle ??= hasGasPriceOracle(floor.client).catch((error: unknown) => {
    floor.oracle = undefined;
    throw error;
  });
  if (!(await floor.oracle)) return 0n;
  try {
    const fee = await getL1DataFee(floor.client, { data: SAMPLE_ITEM });
    floor.oracleFailing = false;
    return fee;
  } catch (error) {
    // An oracle that will not answer: the L2 gas alone is still a lower bound of the cost.
    if (!floor.oracleFailing)
      floor.log.warn(
        { err: error },
        "the GasPriceOracle did not price the L1 data fee; counting L2 gas only",
      );
    floor.oracleFailing = true;
    return 0n;
  }
}

async function read(floor: FloorState): Promise<void> {
  const { client, log } = floor;
  try {
    // Sent together: over the batching transport they are one HTTP request.
    const [block, priorityFeePerGas, l1Fee] = await Promise.all([
      client.getBlock({ blockTag: "latest" }),
      client.estimateMaxPriorityFeePerGas(),
      l1FeeOf(floor),
    ]);
    const baseFeePerGas = block.baseFeePerGas ?? 0n;
    const perGas = baseFeePerGas + priorityFeePerGas;
    const ceiling = floor.maxFeePerGas;
    const costWei =
      SETTLEMENT_ITEM_GAS * (ceiling !== undefined && perGas > ceiling ? ceiling : perGas) + l1Fee;
    const last: TimedReading = {
      at: floor.clock.now(),
      blockNumber: block.number ?? 0n,
      baseFeePerGas,
      priorityFeePerGas,
      l1Fee,
      costWei,
    };
    floor.last = last;
    floor.recent = [
      ...floor.recent.filter((r) => last.at - r.at <= SETTLE_AFTER_VERIFY_GRACE_MS),
      last,
    ].slice(-256);
    if (floor.failing) log.info("the network's fee is read again");
    floor.failing = false;
    report(floor);
  } catch (error) {
    if (!floor.failing)
      log.warn({ err: error }, "the network's fee could not be read; the last minimum stays in force");
    floor.failing = true;
  }
}

/** One line when the fee starts or stops raising a token's minimum above the configured one. */
function report(floor: FloorState): void {
  const { log, raised } = floor;
  for (const token of floor.tokens.values()) {
    const key = token.address.toLowerCase();
    const fee = feeMinimumOf(floor, key);
    const above = fee !== undefined && fee.minimum > token.minAmount;
    if (fee !== undefined) floor.onReading?.(token.address, minimumOf(floor, key), fee.settlementCost);
    if (above === raised.has(key)) continue;
    const text = (units: bigint) => `${formatUnitsExact(units, token.decimals)} ${token.symbol}`;
    if (above) {
      raised.add(key);
      log.warn(
        {
          token: token.address,
          minimum: fee.minimum.toString(),
          settlementCost: fee.settlementCost.toString(),
          baseFeeGwei: formatUnits(floor.last?.baseFeePerGas ?? 0n, 9),
          blockNumber: fee.blockNumber.toString(),
        },
        `network fees raised the minimum payment to ${text(fee.minimum)} (settling one costs ${text(fee.settlementCost)}); payments below it are refused until fees fall`,
      );
    } else {
      raised.delete(key);
      log.info(
        { token: token.address },
        `the minimum payment is back to the configured ${text(token.minAmount)}`,
      );
    }
  }
}

function minimumOf(floor: FloorState, token: string): bigint {
  const configured = floor.tokens.get(token.toLowerCase())?.minAmount ?? 1n;
  const fee = feeMinimumOf(floor, token)?.minimum ?? 0n;
  return fee > configured ? fee : configured;
}

function feeMinimumOf(floor: FloorState, token: string): FeeMinimum | undefined {
  const config = floor.tokens.get(token.toLowerCase());
  if (config === undefined || floor.last === undefined) return undefined;
  return settlementFeeMinimum(floor.last, termsOf(floor, config));
}

function termsOf(floor: FloorState, config: FloorToken) {
  return { decimals: config.decimals, ethPriceMicroUsd: floor.ethPriceMicroUsd, sharePpm: floor.sharePpm };
}

function assertCovers(
  floor: FloorState,
  token: string,
  value: bigint,
  assertOptions: { graceMs?: number | undefined } | undefined,
): void {
  const config = floor.tokens.get(token.toLowerCase());
  const fee = feeMinimumOf(floor, token);
  if (config === undefined || fee === undefined || value >= fee.minimum) return;
  const graceMs = Math.min(assertOptions?.graceMs ?? 0, SETTLE_AFTER_VERIFY_GRACE_MS);
  if (graceMs > 0 && coveredWithin(floor, config, value, graceMs)) return;
  const minimum = minimumOf(floor, token);
  const { maxFeeShare } = floor;
  const text = (units: bigint) => `${formatUnitsExact(units, config.decimals)} ${config.symbol}`;
  throw new TollgateError(
    "AmountMismatch",
    `settling this payment of ${text(value)} would cost about ${text(fee.settlementCost)} in gas at the network's current fee, more than ${maxFeeShare} of its value; this facilitator settles payments of at least ${text(minimum)} while the fee stays this high`,
    {
      details: {
        reason: "settlement_cost_too_high",
        value: value.toString(),
        minimum: minimum.toString(),
        settlementCost: fee.settlementCost.toString(),
        maxFeeShare,
        blockNumber: fee.blockNumber.toString(),
        token: config.address,
      },
    },
  );
}

/** Whether any reading of the last `graceMs` would have admitted `value`. */
function coveredWithin(floor: FloorState, config: FloorToken, value: bigint, graceMs: number): boolean {
  const now = floor.clock.now();
  const terms = termsOf(floor, config);
  return floor.recent.some(
    (reading) => now - reading.at <= graceMs && value >= settlementFeeMinimum(reading, terms).minimum,
  );
}

/** `createFacilitator`'s `settlementFee` option: the share, the ETH price, how fresh a reading must be. */
export type SettlementFeeOptions = Pick<
  SettlementFeeFloorOptions,
  "maxFeeShare" | "ethPriceUsd" | "maxAgeMs"
>;

/**
 * Whether a facilitator on `network` follows the fee: always on a real network (unless `false`); on a
 * devnet, whose ETH is worth nothing, only when an ETH price is given.
 */
export function followsFee(
  options: SettlementFeeOptions | false | undefined,
  devnet: boolean,
): options is SettlementFeeOptions | undefined {
  if (options === false) return false;
  return !devnet || options?.ethPriceUsd !== undefined;
}

/**
 * `/supported` with each token's minimum as the fee has it now: `minAmount` in force, `minAmountFloor`
 * configured, `settlementCost` behind it. A stale reading is read again first, but for at most
 * `waitMs` (default 2 000): a node that is slow or down delays `/supported` (a gate's start-up) by that
 * much, and the answer is then the last reading's, the read finishing in the background.
 */
export async function supportedNow(
  supported: SupportedResponse,
  floor: SettlementFeeFloor,
  waitMs = 2_000,
): Promise<SupportedResponse> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    floor.refresh(),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, waitMs);
      timer.unref?.();
    }),
  ]);
  clearTimeout(timer);
  return {
    ...supported,
    networks: supported.networks.map((network) => ({
      ...network,
      tokens: network.tokens.map((token) => {
        const fee = floor.feeMinimumOf(token.address);
        return {
          ...token,
          minAmount: floor.minimumOf(token.address).toString(),
          ...(fee === undefined
            ? {}
            : {
                settlementCost: {
                  amount: fee.settlementCost.toString(),
                  maxFeeShare: floor.maxFeeShare,
                  blockNumber: fee.blockNumber.toString(),
                },
              }),
        };
      }),
    })),
  };
}
