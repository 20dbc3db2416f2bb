/**
 * Renewals in the transaction outbox (kind `renewal`): each `collectMany` carries the due ids and
 * periods in its row's meta, signed and recorded before it is broadcast. The handler records a mined
 * renewal's attempts in the store transaction that closes its row, exactly once, whoever is alive to
 * see the receipt; ids in a row still open are left out of the next run.
 */

import type { Logger } from "pino";
import type { Hash, Log } from "viem";
import { z } from "zod";
import { collectManyCall } from "../../../chain/actions/subscriptions/collectManyCall.ts";
import { decodeSubscriptionEvents } from "../../../chain/events/decodeSubscriptionEvents.ts";
import { decodeRevert } from "../../../facilitator/chainErrors.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { openRowMeta } from "../../../facilitator/outbox/outboxRecords.ts";
import type { Outbox, OutboxHandler } from "../../../facilitator/outbox/outboxTypes.ts";
import type { Store } from "../../../store/store.ts";
import { type DueRow, type RenewalScope, recordAttempts } from "./renewalRecords.ts";

/** The outbox kind of `collectMany` transactions. */
export const RENEWAL_KIND = "renewal";

/** What a renewal's outbox row carries for its handler. */
const RenewalMetaSchema = z.object({
  chainTime: z.number(),
  due: z.array(z.object({ id: z.string(), periodEnd: z.number() })),
});

/** What a `collectMany` did; `paused` are the failed pulls the token refused for its pause. */
export function renewalOutcomes(
  logs: readonly Log[],
  manager: string,
): { renewed: Set<string>; failed: Set<string>; paused: Set<string> } {
  const renewed = new Set<string>();
  const failed = new Set<string>();
  const paused = new Set<string>();
  for (const event of decodeSubscriptionEvents([...logs])) {
    if (event.address.toLowerCase() !== manager.toLowerCase()) continue;
    if (event.eventName === "SubscriptionRenewed") renewed.add(event.args.subscriptionId.toString());
    if (event.eventName === "RenewalFailed") {
      const id = event.args.subscriptionId.toString();
      if (decodeRevert(event.args.reason)?.code === "TokenPaused") paused.add(id);
      else failed.add(id);
    }
  }
  return { renewed, failed, paused };
}

/** Ids in renewals queued or on their way (this instance's or another's): not collected again yet. */
export async function renewalsOnTheirWay(
  store: Store,
  sender: Pick<FacilitatorContext, "chainId" | "gas">,
): Promise<bigint[]> {
  const metas = await openRowMeta(
    store,
    { chainId: sender.chainId, sender: sender.gas.address },
    RENEWAL_KIND,
  );
  return metas.flatMap((meta) => {
    const parsed = RenewalMetaSchema.safeParse(meta);
    return parsed.success ? parsed.data.due.map((d) => BigInt(d.id)) : [];
  });
}

/**
 * Registers the outbox handler of kind `renewal`: records the attempts of a mined `collectMany` in
 * the store transaction that closes its row. A reverted or dropped renewal records nothing: its
 * subscriptions are still due and the next run collects them.
 */
export function handleRenewals(
  outbox: Outbox,
  deps: {
    scope: RenewalScope;
    retryAfter: number;
    log: Logger;
    knownTokens: readonly string[];
    tokenPause: FacilitatorContext["tokenPause"];
  },
): void {
  const handler: OutboxHandler = async (outcome, commit) => {
    if (outcome.status !== "confirmed") return;
    const meta = RenewalMetaSchema.parse(outcome.meta);
    const due = meta.due.map((d) => ({ subscription_id: BigInt(d.id), current_period_end: d.periodEnd }));
    const { renewed, failed, paused } = renewalOutcomes(outcome.logs, deps.scope.manager);
    await commit((tx) =>
      recordAttempts(tx, deps.scope, meta.chainTime + deps.retryAfter, due, renewed, failed),
    );
    if (paused.size > 0) {
      deps.log.warn({ held: paused.size }, "renewals met a paused token: retried after it is unpaused");
      for (const token of deps.knownTokens) deps.tokenPause?.suspect(token);
    }
  };
  outbox.handle(RENEWAL_KIND, handler);
  // A renewal a reorganisation undid is sent again by the outbox (the same bytes at the same nonce;
  // outbox/confirmedRowWatch.ts) and the handler above records its new receipt. Nothing the handler
  // recorded needs undoing first: renewed ids had their attempts cleared, which the re-sent renewal
  // does again or counts a failure anew, and while the row is open its ids are left out of runs
  // (`renewalsOnTheirWay`). The index follows the chain by itself (subscriptionIndexer.ts, a
  // reorganised cursor).
  outbox.onReorg(RENEWAL_KIND, async () => {});
}

/** Sends `collectMany(rows)` through the outbox and waits for it; `undefined` when it did not go through. */
export async function sendCollect(
  outbox: Outbox,
  deps: { store: Store; scope: RenewalScope; log: Logger },
  chainTime: number,
  rows: readonly DueRow[],
  gas: bigint,
): Promise<{ hash: Hash; logs: readonly Log[] } | undefined> {
  const { manager, chainId } = deps.scope;
  const ids = rows.map((row) => row.subscription_id);
  const id = await outbox.enqueue(deps.store, {
    ...collectManyCall({ manager, subscriptionIds: ids, gas: (gas * 12n) / 10n }),
    kind: RENEWAL_KIND,
    owner: `${chainId}:${manager.toLowerCase()}`,
    meta: {
      chainTime,
      due: rows.map((row) => ({ id: row.subscription_id.toString(), periodEnd: row.current_period_end })),
    },
  });
  const outcome = await outbox.waitFor(id);
  if (outcome.status === "confirmed") return { hash: outcome.hash, logs: outcome.logs };
  deps.log.warn(
    {
      attempted: ids.length,
      status: outcome.status,
      ...(outcome.hash === null ? {} : { tx: outcome.hash }),
    },
    "renewal batch did not go through; splitting it",
  );
  return undefined;
}
