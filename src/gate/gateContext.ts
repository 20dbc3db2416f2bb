/**
 * The context a gate's adapters run a paid request's handler in (an `AsyncLocalStorage` run per
 * request): what the gate accepted for that request, for code the handler calls without passing it
 * along (`deductAllowance(amount)` finds the request's subscription here).
 *
 * Invariant: the carrier is only ever entered with `run` around one request's handler, so
 * `currentGateContext()` is that request's context or `undefined`; nothing is shared between requests.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { ServedSubscription } from "../schemes/types.ts";

/** What the adapters make visible to a handler's asynchronous context. */
export type GateContext = { subscription?: ServedSubscription | undefined };

const requestContext = new AsyncLocalStorage<GateContext>();

/** Runs `handler` with `context` visible to `currentGateContext` (used by the adapters). */
export function runInGateContext<T>(context: GateContext, handler: () => T): T {
  return requestContext.run(context, handler);
}

/** The context of the request whose handler is running, or `undefined` outside one. */
export function currentGateContext(): GateContext | undefined {
  return requestContext.getStore();
}
