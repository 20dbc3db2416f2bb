/**
 * Follows the facilitator's event log (`GET /events?after=&types=&provider=`, with the provider's API
 * key: the feed is per provider) for one provider, so a
 * gate learns within one poll that a subscription was paused, cancelled, renewed or went past due, that
 * a plan was deprecated, and how its metered usage settled on chain.
 *
 * Polling runs on a timer (unref'd: it never keeps a process alive) started by `start()`, and on
 * demand with `pollOnce()`. Polls never overlap. A failed poll is logged and retried on the next tick
 * from the same cursor, so no event is skipped; handlers are called in the feed's order (commit order
 * of the facilitator's transactions, not always id order). The cursor is the feed's opaque `next`.
 */
import type { Address } from "viem";
import type { GateLogger } from "../../../gate/gateLogger.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import {
  type EventCursor,
  type EventFeedResponse,
  EventFeedResponseSchema,
  type FeedEvent,
} from "../../../protocol/subscriptions.ts";

/** The event types a gate acts on. */
export const GATE_EVENT_TYPES = [
  // Created: drops a "no such subscription" cached for an id just before it was taken out.
  "subscription.created",
  "subscription.renewed",
  "subscription.renewal_failed",
  "subscription.paused",
  "subscription.resumed",
  "subscription.cancelled",
  "plan.deprecated",
  "allowance.deducted",
  "allowance.exhausted",
] as const;

export type EventPoller = {
  /**
   * Reads the events not yet seen (up to `maxPagesPerPoll` pages) and hands each to `onEvent`; when it
   * resolves, every event the feed served at the time of the call has been handled (unless the poll
   * failed, which is logged, not thrown). The feed serves an event once its transaction and every
   * older one on the facilitator's database have finished.
   */
  pollOnce(): Promise<void>;
  /** Starts the timer (idempotent). */
  start(): void;
  /** Stops the timer and waits for a poll in progress. */
  stop(): Promise<void>;
  /** The feed's cursor past the last page handled (`undefined` before the first). */
  readonly cursor: EventCursor | undefined;
};

export type EventPollerOptions = {
  facilitator: Pick<FacilitatorClient, "request">;
  provider: Address;
  /** The provider's API key: the feed is per provider and needs it (docs/facilitator.md). */
  apiKey: string;
  /** Called once per event in the feed's order; a returned promise is awaited before the next event. */
  onEvent(event: FeedEvent): void | Promise<void>;
  intervalMs: number;
  logger?: GateLogger | undefined;
  /** Events per page (default 500). */
  pageSize?: number | undefined;
  maxPagesPerPoll?: number | undefined;
};

/** One provider's feed as a poll reads it; `cursor` advances past each page once its events are handled. */
type FeedState = {
  facilitator: Pick<FacilitatorClient, "request">;
  onEvent: EventPollerOptions["onEvent"];
  logger: GateLogger | undefined;
  /** The query after the cursor: types, provider and page size. */
  query: string;
  headers: Record<string, string>;
  pageSize: number;
  maxPages: number;
  cursor: EventCursor | undefined;
};

export function createEventPoller(options: EventPollerOptions): EventPoller {
  const { provider, intervalMs, logger } = options;
  const pageSize = options.pageSize ?? 500;
  const feed: FeedState = {
    facilitator: options.facilitator,
    onEvent: options.onEvent,
    logger,
    query: `types=${GATE_EVENT_TYPES.join(",")}&provider=${provider}&limit=${pageSize}`,
    headers: { authorization: `Bearer ${options.apiKey}` },
    pageSize,
    maxPages: options.maxPagesPerPoll ?? 20,
    cursor: undefined,
  };
  let polling: Promise<void> | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;
  let failing = false;

  let queued: Promise<void> | undefined;
  const pollOnce = (): Promise<void> => {
    // A call made while a poll runs gets a poll that starts after it, so it sees every event recorded
    // before the call; calls made meanwhile share that one.
    if (polling !== undefined) {
      queued ??= polling.then(() => {
        queued = undefined;
        return pollOnce();
      });
      return queued;
    }
    polling = pollPages(feed)
      .then(
        () => {
          if (failing) logger?.warn({}, "facilitator event feed reachable again");
          failing = false;
        },
        (error: unknown) => {
          if (!failing) logger?.warn({ err: error }, "facilitator event feed poll failed; retrying");
          failing = true;
        },
      )
      .finally(() => {
        polling = undefined;
      });
    return polling;
  };

  const schedule = () => {
    if (!running) return;
    timer = setTimeout(() => {
      void pollOnce().finally(schedule);
    }, intervalMs);
    timer.unref?.();
  };

  return {
    get cursor() {
      return feed.cursor;
    },
    pollOnce,
    start() {
      if (running || intervalMs <= 0) return;
      running = true;
      void pollOnce().finally(schedule);
    },
    async stop() {
      running = false;
      if (timer !== undefined) clearTimeout(timer);
      await polling;
    },
  };
}

/** Reads up to `maxPages` pages from the cursor, handing each event to `onEvent` in the feed's order. */
async function pollPages(feed: FeedState): Promise<void> {
  for (let page = 0; page < feed.maxPages; page++) {
    const after = feed.cursor === undefined ? "" : `after=${feed.cursor}&`;
    const reply: EventFeedResponse = await feed.facilitator.request(
      "GET",
      `/events?${after}${feed.query}`,
      EventFeedResponseSchema,
      { timeoutMs: 10_000, headers: feed.headers },
    );
    for (const event of reply.events) {
      try {
        await feed.onEvent(event);
      } catch (error) {
        feed.logger?.warn({ err: error, eventId: event.id }, "a facilitator event could not be applied");
      }
    }
    feed.cursor = reply.next;
    if (reply.events.length < feed.pageSize) return;
  }
}
