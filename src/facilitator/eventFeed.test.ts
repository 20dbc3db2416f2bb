import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorResponse } from "../http/httpErrors.ts";
import { EventFeedResponseSchema } from "../protocol/subscriptions.ts";
import { createTestStore } from "../store/createTestStore.ts";
import type { Store } from "../store/store.ts";
import { eventFeedModule } from "./eventFeed.ts";
import { hashApiKey } from "./providers/requireProvider.ts";

let store: Store;
let app: Hono;

/** The provider whose feed these tests read, and another one. */
const PROVIDER = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const OTHER = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc";
const API_KEY = `tg_${"k".repeat(32)}`;
const OTHER_KEY = `tg_${"o".repeat(32)}`;
const auth = (key = API_KEY) => ({ authorization: `Bearer ${key}` });

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  app = new Hono();
  app.onError((error) => errorResponse(error));
  eventFeedModule({ store }).routes?.(app);
  for (const [address, key] of [
    [PROVIDER, API_KEY],
    [OTHER, OTHER_KEY],
  ] as const) {
    await store.query("INSERT INTO providers (address) VALUES ($1) ON CONFLICT DO NOTHING", [address]);
    await store.query("INSERT INTO provider_api_keys (provider, key_hash, prefix) VALUES ($1, $2, $3)", [
      address,
      hashApiKey(key),
      key.slice(0, 8),
    ]);
  }
}, 120_000); // may open and migrate a PGlite of its own: slow on a busy machine

afterAll(async () => {
  await store?.close();
});

/** One page of `GET /events`, continuing from `after` (a reply's `next`, passed back as it came). */
async function poll(after?: string, limit = 1000) {
  const query = new URLSearchParams({ limit: String(limit) });
  if (after !== undefined) query.set("after", after);
  const response = await app.request(`/events?${query}`, { headers: auth() });
  expect(response.status).toBe(200);
  return EventFeedResponseSchema.parse(await response.json());
}

/** Polls from `cursor` until `count` events came (bounded); returns their ids and the cursor. */
async function follow(cursor: string | undefined, count: number) {
  const ids: number[] = [];
  let next = cursor;
  // The horizon of finished transactions is server-wide on PostgreSQL: other suites sharing the
  // server may hold it back for a moment, so poll again until everything is through (bounded).
  for (let i = 0; i < 100; i++) {
    const page = await poll(next);
    ids.push(...page.events.map((e) => e.id));
    next = page.next;
    if (ids.length >= count) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { ids, next };
}

async function insertEvent(
  db: Pick<Store, "query">,
  subscriptionId: string,
  provider: string = PROVIDER,
): Promise<number> {
  const [row] = await db.query<{ id: string }>(
    "INSERT INTO events (type, data) VALUES ('subscription.paused', $1) RETURNING id",
    [{ subscriptionId, provider }],
  );
  return Number(row!.id);
}

describe("GET /events", () => {
  // PGlite is one connection: it queues every statement behind an open transaction, so a reader can
  // never see a later event while an earlier id is still uncommitted there. A PostgreSQL server runs
  // transactions side by side, which is where ids can become visible out of order.
  it.skipIf(process.env.DATABASE_URL === undefined)(
    "delivers an event whose transaction commits after the one of a higher id (PostgreSQL)",
    async () => {
      const cursor = (await poll()).next;
      let commit!: () => void;
      const held = new Promise<void>((resolve) => {
        commit = resolve;
      });
      let slowId = 0;
      // Transaction A takes the lower id and commits last.
      const slow = store.transaction(async (tx) => {
        slowId = await insertEvent(tx, "a");
        await held;
      });
      while (slowId === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      const fastId = await insertEvent(store, "b");
      expect(fastId).toBeGreaterThan(slowId);

      const first = await poll(cursor);
      commit();
      await slow;
      const rest = await follow(first.next, 2 - first.events.length);
      const delivered = [...first.events.map((e) => e.id), ...rest.ids];
      expect([...delivered].sort((a, b) => a - b)).toEqual([slowId, fastId]);
      // A's event is not served before A has finished, and B's is held back with it: the feed never
      // moves its cursor past an event that may still appear.
      expect(first.events).toEqual([]);
    },
  );

  it("pages through the log from a cursor, each event once, and ends where it started when nothing is new", async () => {
    const start = (await follow(undefined, 0)).next;
    const ids: number[] = [];
    for (let i = 0; i < 5; i++) ids.push(await insertEvent(store, `page-${i}`));
    const { ids: all } = await follow(start, 5);
    expect(all).toEqual(ids);

    const first = await poll(start, 2);
    expect(first.events.map((e) => e.id)).toEqual(ids.slice(0, 2));
    expect(first.events[0]).toMatchObject({
      type: "subscription.paused",
      data: { subscriptionId: "page-0", provider: PROVIDER },
    });
    const second = await poll(first.next, 2);
    expect(second.events.map((e) => e.id)).toEqual(ids.slice(2, 4));
    const third = await poll(second.next, 2);
    expect(third.events.map((e) => e.id)).toEqual(ids.slice(4));
    const idle = await poll(third.next, 2);
    expect(idle).toEqual({ events: [], next: third.next });
  });

  it("orders events by transaction id as a number, so a page never ends past an event not yet served", async () => {
    // Transaction ids 9 and 10 (written explicitly: long finished on any store): as text "10" sorts
    // before "9", and a page of one ending at 10 would leave 9 behind its cursor for good.
    const [late] = await store.query<{ id: string }>(
      "INSERT INTO events (type, data, tx) VALUES ('subscription.paused', $1, '10') RETURNING id",
      [{ subscriptionId: "tx-10", provider: PROVIDER }],
    );
    const [early] = await store.query<{ id: string }>(
      "INSERT INTO events (type, data, tx) VALUES ('subscription.paused', $1, '9') RETURNING id",
      [{ subscriptionId: "tx-9", provider: PROVIDER }],
    );
    const first = await poll("8.0", 1);
    expect(first.events.map((e) => e.id)).toEqual([Number(early!.id)]);
    const second = await poll(first.next, 1);
    expect(second.events.map((e) => e.id)).toEqual([Number(late!.id)]);
  });

  it.each([
    ["a number", "12"],
    ["a negative number", "-1"],
    ["three parts", "1.2.3"],
    ["a missing event id", "12."],
    ["a missing transaction id", ".12"],
    ["leading zeros", "01.2"],
    ["letters", "abc.def"],
    ["spaces", " 1.2"],
    ["a transaction id past 64 bits", "18446744073709551616.1"],
    ["an event id past 2^53", "1.9007199254740993"],
    ["an empty cursor", ""],
  ])("answers 400 InvalidRequest to a cursor with %s", async (_what, after) => {
    const response = await app.request(`/events?after=${encodeURIComponent(after)}`, { headers: auth() });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: { code: "InvalidRequest" } });
  });

  it("serves a key only its own provider's events, and refuses a request without a key", async () => {
    const start = (await follow(undefined, 0)).next;
    const theirs = await insertEvent(store, "theirs", OTHER);
    const mine = await insertEvent(store, "mine");
    const { ids } = await follow(start, 1);
    expect(ids).toEqual([mine]);
    const other = await app.request(`/events?after=${start}`, { headers: auth(OTHER_KEY) });
    expect((await other.json()).events.map((e: { id: number }) => e.id)).toEqual([theirs]);

    for (const headers of [{}, { authorization: `Bearer tg_${"x".repeat(32)}` }]) {
      const response = await app.request("/events", { headers });
      expect(response.status).toBe(401);
      expect(await response.json()).toMatchObject({ error: { code: "Unauthorized" } });
    }
    const foreign = await app.request(`/events?provider=${OTHER}`, { headers: auth() });
    expect(foreign.status).toBe(401);
    const own = await app.request(`/events?provider=${PROVIDER}`, { headers: auth() });
    expect(own.status).toBe(200);
  });

  it("accepts the largest cursor and serves nothing past it", async () => {
    const last = "18446744073709551615.9007199254740991";
    expect(await poll(last)).toEqual({ events: [], next: last });
  });
});
