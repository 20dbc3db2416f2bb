/**
 * The renewal keeper (docs/subscriptions.md): charges due subscriptions with `collectMany`, so renewals need
 * no action from subscribers or providers.
 *
 * - "Due" is judged against the chain's time (the latest block's timestamp), never the wall clock: a
 *   devnet's time is moved by `advanceTime`, and a real chain's clock is the one the contract uses.
 * - Outcomes come from the chain: the contract renews (SubscriptionRenewed) or marks the subscription
 *   PastDue (RenewalFailed) without reverting, and the indexer turns those logs into
 *   `subscription.renewed` / `subscription.renewal_failed`. The keeper itself writes no events.
 * - A failed pull is retried for the same period after `retryAfterSeconds` of chain time, at most
 *   `maxAttempts` times; a PastDue subscription is not charged again on every run.
 * - Every `collectMany` goes through the transaction outbox (kind `renewal`, the due ids and periods in
 *   its meta): signed and recorded before it is broadcast, and its outcome (the attempts bookkeeping)
 *   recorded by the outbox handler exactly once, also when the keeper died after sending it. Ids in a
 *   renewal still on its way are left out of the next run. Collecting is idempotent on chain too (a
 *   renewed subscription is no longer due and `collectMany` skips it), so a keeper that dies mid-run is
 *   simply run again. A lease in the store lets one
 *   facilitator instance at a time run it, so instances sharing a database do not waste gas; its holder
 *   renews it while it runs, so the lease of an instance that died expires within `leaseMs` (15 s).
 * - One subscription cannot hold back the others. Anyone may create a plan in any token, so the keeper
 *   collects only subscriptions whose plan token is one this facilitator serves (`ctx.tokens`); and a
 *   batch that would revert as a whole (a hostile token on a manager deployed before per-item
 *   isolation, a call that needs absurd gas) is split in halves until the items that revert alone are
 *   found. Those are set aside with the back-off of a failed pull, so they do not sit at the head of
 *   every later run, and every other item of the batch is collected in the same run.
 * - A token paused by its issuer (tokenPauseWatch.ts) holds its plans' renewals: they are not sent
 *   (every pull would fail and mark the subscription PastDue), and the unpause wakes the keeper. A
 *   renewal that met a pause anyway (paused while it was on its way) counts no failure and no back-off:
 *   its subscription is due again at the next run after the unpause.
 */
import { randomBytes } from "node:crypto";
import { isChainUnreachable } from "../../../facilitator/chainErrors.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { outboxFor } from "../../../facilitator/outbox/outboxFor.ts";
import type { Outbox } from "../../../facilitator/outbox/outboxTypes.ts";
import { createWakeablePause } from "../../../facilitator/wakeablePause.ts";
import type { KeeperRun, RenewalKeeper, RenewalKeeperOptions } from "./renewalKeeperTypes.ts";
import { createRenewalLease } from "./renewalLease.ts";
import { handleRenewals } from "./renewalOutbox.ts";
import { anyRenewable } from "./renewalRecords.ts";
import { type RenewalRunDeps, runRenewals } from "./renewalRun.ts";
import type { SubscriptionIndexer } from "./subscriptionIndexer.ts";

export type { KeeperRun, RenewalKeeper, RenewalKeeperOptions } from "./renewalKeeperTypes.ts";
export { RENEWAL_KIND } from "./renewalOutbox.ts";

type KeeperContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "tokens" | "tokenPause"
>;

/**
 * Composes the keeper: its lease (renewalLease.ts), its outbox handler and sends (renewalOutbox.ts),
 * its rows (renewalRecords.ts), the split-on-revert collector (renewalCollector.ts) and one run
 * (renewalRun.ts), with the background loop here.
 */
export function createRenewalKeeper(
  ctx: KeeperContext & Partial<Pick<FacilitatorContext, "outbox" | "clock">>,
  deps: {
    indexer?: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
    outbox?: Outbox | undefined;
  } & RenewalKeeperOptions = {},
): RenewalKeeper {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the renewal keeper needs a SubscriptionManager address");
  }
  const scope = { chainId: ctx.chainId, manager: ctx.subscriptionManager };
  const intervalMs = deps.intervalMs ?? 30_000;
  const leaseMs = deps.leaseMs ?? 15_000;
  const retryAfter = deps.retryAfterSeconds ?? 86_400;
  const knownTokens = ctx.tokens.map((token) => token.address.toLowerCase());
  const holder = `${ctx.gas.address.toLowerCase()}:${randomBytes(6).toString("hex")}`;
  const log = ctx.logger.child({ component: "renewal-keeper" });
  const outbox = deps.outbox ?? outboxFor(ctx);
  const run: RenewalRunDeps = {
    ctx,
    outbox,
    scope,
    retryAfter,
    log,
    knownTokens,
    lease: createRenewalLease(ctx.store, { ...scope, holder, leaseMs }),
    indexer: deps.indexer,
    maxAttempts: deps.maxAttempts ?? 4,
    batchSize: deps.batchSize ?? 50,
    waitForLeaseMs: deps.waitForLeaseMs ?? 120_000,
  };
  handleRenewals(outbox, { scope, retryAfter, log, knownTokens, tokenPause: ctx.tokenPause });

  let running = false;
  let loopDone: Promise<void> | undefined;
  const sleeper = createWakeablePause();
  let current: Promise<KeeperRun> | undefined;
  let stopResume: (() => void) | undefined;

  function runOnce(): Promise<KeeperRun> {
    // One run at a time in this process; a second caller gets the run in progress.
    current ??= runRenewals(run).finally(() => {
      current = undefined;
    });
    return current;
  }

  async function loop(): Promise<void> {
    while (running) {
      try {
        // The indexer follows the manager's logs by itself: with no subscription in the index there is
        // nothing due, and the run's chain reads are saved.
        if (await anyRenewable(ctx.store, scope)) await runOnce();
      } catch (error) {
        if (isChainUnreachable(error)) log.warn("chain unreachable; renewals wait for the next run");
        else log.error({ err: error }, "renewal run failed");
      }
      if (!running) break;
      await sleeper.pause(intervalMs);
    }
  }

  return {
    runOnce,
    async start() {
      if (running) return;
      running = true;
      if (outbox !== ctx.outbox) await outbox.start();
      stopResume = ctx.tokenPause?.onResume(() => sleeper.wake());
      loopDone = loop();
    },
    async stop() {
      running = false;
      stopResume?.();
      sleeper.wake();
      await loopDone;
      if (outbox !== ctx.outbox) await outbox.stop();
    },
  };
}
