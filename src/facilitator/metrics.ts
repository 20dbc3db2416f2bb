/**
 * Prometheus metrics of one facilitator (docs/facilitator.md, "Metrics"): a registry per instance, never prom-client's
 * global default, so two facilitators in one process (tests, the demo) do not share counters.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { GasRunwayState } from "./gasRunway.ts";
import type { FeeHoldState } from "./outbox/feeHold.ts";
import type { SettlementMetrics } from "./settlementEngine.ts";

/** What the gas key's gauges read at each scrape (no work between scrapes, no RPC call at one). */
export type GasGaugeSources = {
  /** The outbox's rows waiting for the fee (outbox/feeHold.ts). */
  feeHold(): FeeHoldState | undefined;
  /** The `maxFeePerGas` the chain asked at the last fee read, before the ceiling. */
  feeAsked(): bigint | undefined;
  /** The operator's maximum fee (TOLLGATE_MAX_FEE_GWEI), if any. */
  ceiling: bigint | undefined;
  /** The key's balance and runway as last read (gasRunway.ts). */
  runway(): GasRunwayState | undefined;
};

export type FacilitatorMetrics = SettlementMetrics & {
  registry: Registry;
  requests: Counter<"route" | "status">;
  /** `tollgate_token_paused{token}`: 1 while the token's issuer has it paused (tokenPauseWatch.ts), else 0. */
  onTokenPaused(token: string, paused: boolean): void;
  /**
   * `tollgate_payment_minimum{token}` and `tollgate_settlement_cost{token}`, smallest unit: the minimum
   * payment in force and what settling one costs at the last fee reading (abuse/settlementFeeFloor.ts).
   */
  onPaymentMinimum(token: string, minimum: bigint, settlementCost: bigint): void;
  /**
   * The gas key's gauges, read from `sources` at each scrape: `tollgate_outbox_fee_held_rows`,
   * `tollgate_gas_fee_asked_wei`, `tollgate_gas_max_fee_wei`, `tollgate_gas_base_fee_wei`,
   * `tollgate_gas_key_balance_wei`, `tollgate_gas_key_runway_seconds`.
   */
  watchGas(sources: GasGaugeSources): void;
  /**
   * `tollgate_reorg_reopened_total{kind}`: confirmed transactions a chain reorganisation undid, reopened
   * and sent again by the outbox (outbox/confirmedRowWatch.ts), by kind (settlement, renewal, usage,
   * channel-claim, channel-close).
   */
  onReorgReopened(kind: string): void;
  /** The RPC providers' state (src/chain/rpcTransport.ts), by redacted URL. */
  rpc: {
    /** `tollgate_rpc_provider_up{provider}`: 1 while used, 0 while passed over for failing. */
    onUp(provider: string, up: boolean): void;
    /** `tollgate_rpc_provider_lagging{provider}`: 1 while its head is too far behind the others', else 0. */
    onLagging(provider: string, lagging: boolean): void;
    /** `tollgate_rpc_retries_total`: calls sent again after every provider failed them. */
    onRetry(): void;
  };
};

export function createFacilitatorMetrics(): FacilitatorMetrics {
  const registry = new Registry();
  // Declared in this order, which is the order of the families in a scrape.
  const settlement = settlementMetrics(registry);
  const requests = new Counter({
    name: "tollgate_http_requests_total",
    help: "HTTP requests by route and status",
    labelNames: ["route", "status"] as const,
    registers: [registry],
  });
  const token = tokenMetrics(registry);
  const chain = chainMetrics(registry);
  let gas: GasGaugeSources | undefined;
  declareGasGauges(registry, () => gas);
  return {
    registry,
    requests,
    watchGas(sources) {
      gas = sources;
    },
    ...chain,
    ...token,
    ...settlement,
  };
}

/** The settlement engine's families: settled count and volume, failures, batch sizes, latency. */
function settlementMetrics(registry: Registry): SettlementMetrics {
  const settled = new Counter({
    name: "tollgate_payments_settled_total",
    help: "Payments settled on chain",
    labelNames: ["token"] as const,
    registers: [registry],
  });
  // Volume in the token's smallest unit; a float counter is exact up to 2^53 units (9e9 USDC).
  const volume = new Counter({
    name: "tollgate_payments_settled_volume",
    help: "Settled volume in the token's smallest unit",
    labelNames: ["token"] as const,
    registers: [registry],
  });
  const failed = new Counter({
    name: "tollgate_payments_failed_total",
    help: "Payments that failed on chain, by error code",
    labelNames: ["code"] as const,
    registers: [registry],
  });
  const batchSize = new Histogram({
    name: "tollgate_settlement_batch_size",
    help: "Payments per settlement transaction",
    buckets: [1, 2, 4, 8, 16, 32, 64, 128],
    registers: [registry],
  });
  const latency = new Histogram({
    name: "tollgate_settlement_latency_seconds",
    help: "Seconds from a payment's arrival to its recorded outcome",
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16],
    registers: [registry],
  });
  return {
    onSettled(count, amount, token) {
      settled.inc({ token }, count);
      volume.inc({ token }, Number(amount));
    },
    onFailed: (code) => failed.inc({ code }),
    onBatch: (size) => batchSize.observe(size),
    onLatency: (seconds) => latency.observe(seconds),
  };
}

/** The token's families: its issuer's pause, the minimum payment in force and the settlement cost behind it. */
function tokenMetrics(registry: Registry): Pick<FacilitatorMetrics, "onTokenPaused" | "onPaymentMinimum"> {
  const tokenPaused = new Gauge({
    name: "tollgate_token_paused",
    help: "1 while the token's issuer has it paused and settlement in it is held, else 0",
    labelNames: ["token"] as const,
    registers: [registry],
  });
  const paymentMinimum = new Gauge({
    name: "tollgate_payment_minimum",
    help: "The smallest payment settled now, in the token's smallest unit: the configured minimum, or more while the network's fee is high",
    labelNames: ["token"] as const,
    registers: [registry],
  });
  const settlementCost = new Gauge({
    name: "tollgate_settlement_cost",
    help: "What settling one payment in a batch costs at the last fee reading, in the token's smallest unit",
    labelNames: ["token"] as const,
    registers: [registry],
  });
  return {
    onTokenPaused: (token, paused) => tokenPaused.set({ token }, paused ? 1 : 0),
    onPaymentMinimum(token, minimum, cost) {
      paymentMinimum.set({ token }, Number(minimum));
      settlementCost.set({ token }, Number(cost));
    },
  };
}

/** The chain's families: the RPC providers' state and retries, the transactions a reorganisation reopened. */
function chainMetrics(registry: Registry): Pick<FacilitatorMetrics, "rpc" | "onReorgReopened"> {
  const rpcUp = new Gauge({
    name: "tollgate_rpc_provider_up",
    help: "1 while the RPC provider (by redacted URL) is used, 0 while it is passed over for failing",
    labelNames: ["provider"] as const,
    registers: [registry],
  });
  const rpcLagging = new Gauge({
    name: "tollgate_rpc_provider_lagging",
    help: "1 while the RPC provider's head is too far behind the other providers', else 0",
    labelNames: ["provider"] as const,
    registers: [registry],
  });
  const reorgReopened = new Counter({
    name: "tollgate_reorg_reopened_total",
    help: "Confirmed transactions a chain reorganisation undid, reopened and sent again, by kind",
    labelNames: ["kind"] as const,
    registers: [registry],
  });
  const rpcRetries = new Counter({
    name: "tollgate_rpc_retries_total",
    help: "RPC calls sent again, after a backoff, because every provider failed them (429, 5xx, timeout)",
    registers: [registry],
  });
  return {
    rpc: {
      onUp: (provider, up) => rpcUp.set({ provider }, up ? 1 : 0),
      onLagging: (provider, lagging) => rpcLagging.set({ provider }, lagging ? 1 : 0),
      onRetry: () => rpcRetries.inc(),
    },
    onReorgReopened: (kind) => reorgReopened.inc({ kind }),
  };
}

/** The gas key's gauges, each read from `sources()` at scrape time (`watchGas` sets them). */
function declareGasGauges(registry: Registry, sources: () => GasGaugeSources | undefined): void {
  /** A gauge set from the sources at scrape time; no value (no sample) while `read` gives none. */
  const gasGauge = (name: string, help: string, read: (g: GasGaugeSources) => number | bigint | undefined) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        const gas = sources();
        const value = gas === undefined ? undefined : read(gas);
        if (value !== undefined) this.set(Number(value));
      },
    });
  gasGauge(
    "tollgate_outbox_fee_held_rows",
    "Transactions waiting, unmined, for the chain's fee to fall under the maximum fee (TOLLGATE_MAX_FEE_GWEI)",
    (g) => g.feeHold()?.rows ?? 0,
  );
  gasGauge(
    "tollgate_gas_fee_asked_wei",
    "The maxFeePerGas the chain asked at the last fee read (wei per gas), before the maximum fee",
    (g) => g.feeAsked(),
  );
  gasGauge(
    "tollgate_gas_max_fee_wei",
    "The maximum fee a transaction offers (TOLLGATE_MAX_FEE_GWEI, in wei per gas); absent when unset",
    (g) => g.ceiling,
  );
  gasGauge(
    "tollgate_gas_base_fee_wei",
    "The chain's base fee (wei per gas) as read while transactions wait for the fee; absent otherwise",
    (g) => g.feeHold()?.baseFee,
  );
  gasGauge(
    "tollgate_gas_key_balance_wei",
    "The gas key's balance (wei) as last read",
    (g) => g.runway()?.balance,
  );
  gasGauge(
    "tollgate_gas_key_runway_seconds",
    "Seconds the gas key's balance lasts at its recent spending (the last 24 h); +Inf when it spent nothing",
    (g) => {
      const runway = g.runway();
      if (runway === undefined) return undefined;
      return runway.runwaySeconds ?? Number.POSITIVE_INFINITY;
    },
  );
}
