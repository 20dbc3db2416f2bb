/** What the parts of the subscription indexer (subscriptionIndexer.ts) share. */
import type { Logger } from "pino";
import type { Address } from "viem";
import type { decodeSubscriptionEvents } from "../../../chain/events/decodeSubscriptionEvents.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import type { IndexScope } from "./subscriptionRecords.ts";

export type IndexerContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "chainId" | "network" | "subscriptionManager" | "logger" | "recordEvent"
> &
  Partial<Pick<FacilitatorContext, "logsRange">>;

export type ManagerEvent = ReturnType<typeof decodeSubscriptionEvents>[number];

/** How far back the index looks for logs a reorganisation removed (the outbox watches as deep). */
export const REORG_DEPTH = 64n;

/** One indexer's deployment: the manager it follows, its cursor's name, its client and log. */
export type IndexerDeps = {
  ctx: IndexerContext;
  client: IndexerContext["publicClient"];
  manager: Address;
  scope: IndexScope;
  cursorName: string;
  log: Logger;
};

export function indexerDeps(ctx: IndexerContext, manager: Address): IndexerDeps {
  return {
    ctx,
    client: ctx.publicClient,
    manager,
    scope: { chainId: ctx.chainId, manager },
    cursorName: `subscriptions:${ctx.chainId}:${manager.toLowerCase()}`,
    log: ctx.logger.child({ component: "subscription-indexer" }),
  };
}
