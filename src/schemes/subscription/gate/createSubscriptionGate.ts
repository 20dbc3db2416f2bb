/**
 * The subscription side of `paymentGate` (docs/protocol.md, "Subscription requests"; docs/gate.md): decides whether a request carrying
 * `X-Tollgate-Sub` and `X-Tollgate-Sub-Auth` is served under a subscription, and meters it.
 *
 * Order of checks, cheapest and most local first:
 * 1. the id is a canonical decimal and a token is present;
 * 2. the token (cached by its text until `exp`): well-formed, `aud` = the gate's public origin, issued
 *    for this id, unexpired, at most an hour long — all before its signature is recovered, once per
 *    token, never per request;
 * 3. the subscription's state (cached, `statusTtlMs`, dropped on facilitator events): it exists, its
 *    subscriber is the token's signer, its plan is one of this route's plans (all sold by this gate's
 *    `payTo` in its token), and it is Active with its renewal not overdue (`renewalGraceSeconds`);
 * 4. on a metered route, the use is reserved in the usage ledger against the included units, the
 *    subscription's overage cap and the gate's bound on unsettled usage.
 *
 * Refusals are data (`refuse`, answered with a fresh 402; `busy`, answered 429); faults (facilitator
 * unreachable, ledger down) are thrown and answered 5xx by the gate, so a subscriber is never told its
 * subscription is invalid when the gate merely could not check it.
 *
 * Its types are in subscriptionGateTypes.ts; its parts are module functions over one context
 * (subscriptionGateContext.ts): `check` (subscriptionCheck.ts), the decision and the ledger's
 * reservation (subscriptionUse.ts), `deduct` (deductSubscriptionAllowance.ts), the event feed
 * (subscriptionGateEvents.ts) and the reports of exhaustion (exhaustionReports.ts).
 */
import { getSubscriptionInfo } from "../client/facilitatorSubscriptions.ts";
import { createSubAuthVerifier } from "./createSubAuthVerifier.ts";
import {
  createSubscriptionStatusCache,
  type SubscriptionStatusCache,
} from "./createSubscriptionStatusCache.ts";
import { deductSubscriptionAllowance } from "./deductSubscriptionAllowance.ts";
import { createExhaustionReports } from "./exhaustionReports.ts";
import { checkSubscription } from "./subscriptionCheck.ts";
import type { SubscriptionGateContext } from "./subscriptionGateContext.ts";
import { createGateEventPoller } from "./subscriptionGateEvents.ts";
import type { SubscriptionGate, SubscriptionGateOptions } from "./subscriptionGateTypes.ts";

export type {
  AllowanceDeduction,
  GateSubscription,
  SubscriptionGate,
  SubscriptionGateOptions,
  SubscriptionOutcome,
  SubscriptionRoute,
} from "./subscriptionGateTypes.ts";

export function createSubscriptionGate(options: SubscriptionGateOptions): SubscriptionGate {
  const { facilitator, clock, metering } = options;
  const verifier = options.verifier ?? createSubAuthVerifier({ audience: options.audience, clock });
  const statuses: SubscriptionStatusCache = createSubscriptionStatusCache({
    read: (id) => getSubscriptionInfo(facilitator, id, { timeoutMs: 10_000 }),
    clock,
    ttlMs: options.statusTtlMs,
    // Refreshed in the background from ¾ of its TTL on, so requests in steady use never wait for it.
    refreshAfterMs: (options.statusTtlMs * 3) / 4,
  });
  const poller = createGateEventPoller(options, statuses);
  const ctx: SubscriptionGateContext = {
    options,
    verifier,
    statuses,
    exhaustion: createExhaustionReports(options),
    parsed: new WeakMap(),
  };
  let started = false;
  const startBackground = () => {
    if (started) return;
    started = true;
    poller.start();
    metering?.flusher?.start();
  };

  return {
    check(request) {
      startBackground();
      return checkSubscription(ctx, request);
    },
    deduct: (subscriptionId, amount) => deductSubscriptionAllowance(ctx, subscriptionId, amount),
    syncEvents: () => poller.pollOnce(),
    async flushUsage() {
      const flusher = metering?.flusher;
      if (flusher === undefined) return 0;
      await metering?.ledger.returnLeases?.();
      const sent = await flusher.flush();
      await flusher.reconcile();
      return sent;
    },
    invalidate: (id) => statuses.invalidate(id),
    async close() {
      await poller.stop();
      await metering?.ledger.returnLeases?.();
      await metering?.flusher?.stop();
    },
  };
}
