/**
 * Prometheus metrics of one facilitator (DESIGN.md §4): a registry per instance, never prom-client's
 * global default, so two facilitators in one process (tests, the demo) do not share counters.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { SettlementMetrics } from "./settlementEngine.ts";

export type FacilitatorMetrics = SettlementMetrics & {
  registry: Registry;
  requests: Counter<"route" | "status">;
  /** `tollgate_token_paused{token}`: 1 while the token's issuer has it paused (tokenPauseWatch.ts), else 0. */
  onTokenPaused(token: string, paused: boolean): void;
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
  const requests = new Counter({
    name: "tollgate_http_requests_total",
    help: "HTTP requests by route and status",
    labelNames: ["route", "status"] as const,
    registers: [registry],
  });
  const tokenPaused = new Gauge({
    name: "tollgate_token_paused",
    help: "1 while the token's issuer has it paused and settlement in it is held, else 0",
    labelNames: ["token"] as const,
    registers: [registry],
  });
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
  const rpcRetries = new Counter({
    name: "tollgate_rpc_retries_total",
    help: "RPC calls sent again, after a backoff, because every provider failed them (429, 5xx, timeout)",
    registers: [registry],
  });
  return {
    registry,
    requests,
    rpc: {
      onUp: (provider, up) => rpcUp.set({ provider }, up ? 1 : 0),
      onLagging: (provider, lagging) => rpcLagging.set({ provider }, lagging ? 1 : 0),
      onRetry: () => rpcRetries.inc(),
    },
    onTokenPaused: (token, paused) => tokenPaused.set({ token }, paused ? 1 : 0),
    onSettled(count, amount, token) {
      settled.inc({ token }, count);
      volume.inc({ token }, Number(amount));
    },
    onFailed: (code) => failed.inc({ code }),
    onBatch: (size) => batchSize.observe(size),
    onLatency: (seconds) => latency.observe(seconds),
  };
}
