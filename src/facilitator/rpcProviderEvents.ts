/**
 * What the operator hears of the RPC providers (src/chain/rpcTransport.ts): one line when a provider
 * starts failing or lagging and one when it is back, never one per call; retries go to debug and to
 * `tollgate_rpc_retries_total`. Providers are named by their redacted URL only.
 */
import type { Logger } from "pino";
import type { RpcProviderEvent } from "../chain/rpcTransport.ts";
import type { FacilitatorMetrics } from "./metrics.ts";

export function logRpcProviderEvents(
  log: Logger,
  metrics: Pick<FacilitatorMetrics, "rpc">,
): (event: RpcProviderEvent) => void {
  return (event) => {
    switch (event.kind) {
      case "down":
        metrics.rpc.onUp(event.provider, false);
        log.warn(
          { provider: event.provider, err: event.error },
          "RPC provider failing; calls go to the next provider, this one is tried again later",
        );
        return;
      case "up":
        metrics.rpc.onUp(event.provider, true);
        log.info({ provider: event.provider }, "RPC provider answering again");
        return;
      case "lagging":
        metrics.rpc.onLagging(event.provider, true);
        log.warn(
          { provider: event.provider, head: String(event.head), highest: String(event.highest) },
          "RPC provider lags behind the others; not read from until it catches up",
        );
        return;
      case "stalled":
        metrics.rpc.onLagging(event.provider, true);
        log.warn(
          { provider: event.provider, head: String(event.head), sinceMs: Math.round(event.sinceMs) },
          "RPC provider's head has not moved for several block times; not read from while another provider answers",
        );
        return;
      case "caught-up":
        metrics.rpc.onLagging(event.provider, false);
        log.info({ provider: event.provider, head: String(event.head) }, "RPC provider caught up");
        return;
      case "retry":
        metrics.rpc.onRetry();
        log.debug(
          { attempt: event.attempt, delayMs: event.delayMs, err: event.error },
          "RPC call failed at every provider; trying again after a backoff",
        );
        return;
    }
  };
}
