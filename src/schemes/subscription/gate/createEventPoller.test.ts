import { describe, expect, it } from "vitest";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { FeedEvent } from "../../../protocol/subscriptions.ts";
import { createEventPoller } from "./createEventPoller.ts";

const PROVIDER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const API_KEY = `tg_${"k".repeat(32)}`;

/**
 * An event feed over `events` (in the order the feed serves them), answering `GET /events` pages as
 * the facilitator does; its cursor is `0.<events served>`, opaque to the poller.
 */
function feed(events: FeedEvent[]) {
  const asked: string[] = [];
  const authorizations: (string | undefined)[] = [];
  let failNext = false;
  const client: Pick<FacilitatorClient, "request"> = {
    async request(_method, path, schema, options) {
      asked.push(path);
      authorizations.push(options?.headers?.authorization);
      if (failNext) {
        failNext = false;
        throw new TollgateError("ChainUnavailable", "down");
      }
      const query = new URL(path, "http://f").searchParams;
      const served = Number((query.get("after") ?? "0.0").split(".")[1]);
      const limit = Number(query.get("limit"));
      const page = events.slice(served, served + limit);
      return schema.parse({ events: page, next: `0.${served + page.length}` });
    },
  };
  return {
    client,
    asked,
    authorizations,
    failOnce() {
      failNext = true;
    },
  };
}

const event = (id: number): FeedEvent => ({
  id,
  type: "subscription.paused",
  created: 0,
  data: { subscriptionId: String(id) },
});

describe("createEventPoller", () => {
  it("hands every event to the handler in id order across pages and continues from its cursor", async () => {
    const events = Array.from({ length: 7 }, (_, i) => event(i + 1));
    const f = feed(events);
    const seen: number[] = [];
    const poller = createEventPoller({
      facilitator: f.client,
      provider: PROVIDER,
      apiKey: API_KEY,
      onEvent: (e) => {
        seen.push(e.id);
      },
      intervalMs: 0,
      pageSize: 3,
    });
    await poller.pollOnce();
    expect(seen).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(poller.cursor).toBe("0.7");
    expect(f.asked[0]).not.toMatch(/after=/);
    expect(f.asked[2]).toMatch(/after=0\.6&/);
    expect(f.asked[0]).toMatch(/provider=0x70997970C51812dc3A010C7d01b50e0d17dc79C8/);
    expect(f.asked[0]).toMatch(/types=subscription\.created,subscription\.renewed/);
    // The feed is per provider and needs the provider's key.
    expect(new Set(f.authorizations)).toEqual(new Set([`Bearer ${API_KEY}`]));
    events.push(event(8));
    await poller.pollOnce();
    expect(seen).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it("hands over an event served after one with a higher id (a transaction that committed later)", async () => {
    const events = [event(2)];
    const f = feed(events);
    const seen: number[] = [];
    const poller = createEventPoller({
      facilitator: f.client,
      provider: PROVIDER,
      apiKey: API_KEY,
      onEvent: (e) => {
        seen.push(e.id);
      },
      intervalMs: 0,
    });
    await poller.pollOnce();
    events.push(event(1));
    await poller.pollOnce();
    expect(seen).toEqual([2, 1]);
  });

  it("retries a failed poll from the same cursor, skipping nothing", async () => {
    const events = [event(1), event(2)];
    const f = feed(events);
    const seen: number[] = [];
    const poller = createEventPoller({
      facilitator: f.client,
      provider: PROVIDER,
      apiKey: API_KEY,
      onEvent: (e) => {
        seen.push(e.id);
      },
      intervalMs: 0,
    });
    await poller.pollOnce();
    events.push(event(3));
    f.failOnce();
    await poller.pollOnce();
    expect(seen).toEqual([1, 2]);
    await poller.pollOnce();
    expect(seen).toEqual([1, 2, 3]);
  });

  it("gives a call made during a poll a poll that starts after it, shared by concurrent callers", async () => {
    const events = [event(1)];
    const f = feed(events);
    const seen: number[] = [];
    const poller = createEventPoller({
      facilitator: f.client,
      provider: PROVIDER,
      apiKey: API_KEY,
      onEvent: (e) => {
        seen.push(e.id);
      },
      intervalMs: 0,
    });
    const first = poller.pollOnce();
    events.push(event(2));
    const [, second, third] = [first, poller.pollOnce(), poller.pollOnce()];
    await Promise.all([first, second, third]);
    expect(seen).toEqual([1, 2]);
    expect(f.asked).toHaveLength(2);
  });

  it("keeps polling after a handler throws, and logs it", async () => {
    const f = feed([event(1), event(2)]);
    const warnings: string[] = [];
    const seen: number[] = [];
    const poller = createEventPoller({
      facilitator: f.client,
      provider: PROVIDER,
      apiKey: API_KEY,
      onEvent: (e) => {
        if (e.id === 1) throw new Error("bad event");
        seen.push(e.id);
      },
      intervalMs: 0,
      logger: { debug() {}, warn: (_o, m) => warnings.push(m ?? ""), error() {} },
    });
    await poller.pollOnce();
    expect(seen).toEqual([2]);
    expect(warnings).toEqual(["a facilitator event could not be applied"]);
  });
  it("resolves pollOnce only after each asynchronous handler has finished, one event at a time", async () => {
    const f = feed([event(1), event(2), event(3)]);
    const log: string[] = [];
    const poller = createEventPoller({
      facilitator: f.client,
      provider: PROVIDER,
      apiKey: API_KEY,
      onEvent: async (e) => {
        log.push(`start ${e.id}`);
        await new Promise((resolve) => setTimeout(resolve, 5));
        log.push(`end ${e.id}`);
      },
      intervalMs: 0,
    });
    await poller.pollOnce();
    expect(log).toEqual(["start 1", "end 1", "start 2", "end 2", "start 3", "end 3"]);
  });
});
