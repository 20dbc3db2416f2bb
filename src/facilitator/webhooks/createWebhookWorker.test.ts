import pino from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { verifyWebhook } from "../../gate/verifyWebhook.ts";
import { createWebhookTargetPolicy } from "../../http/webhookTargets.ts";
import { createFixedClock } from "../../protocol/clock.ts";
import type { WebhookEvent } from "../../protocol/webhook.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { createWebhookRepository } from "./createWebhookRepository.ts";
import { createWebhookWorker, type WebhookFetch, type WebhookWorkerOptions } from "./createWebhookWorker.ts";
import { createWebhookSecretBox } from "./webhookSecretBox.ts";

const logger = pino({ level: "silent" });
const START = Date.UTC(2026, 10, 22, 12, 0, 0);
const provider = "0x00000000000000000000000000000000000000aa";
const otherProvider = "0x00000000000000000000000000000000000000bb";

let store: Store;
let counter = 0;
/** Seals the endpoints' secrets in the store (the same key for the repository and the worker). */
const secrets = createWebhookSecretBox([new Uint8Array(32).fill(9)]);
/** DNS for the `*.example` receivers below: a public address, so the target check lets them through. */
const targets = createWebhookTargetPolicy({
  lookup: async () => [{ address: "93.184.215.14", family: 4 }],
});
const repository = () =>
  createWebhookRepository({
    store,
    secrets,
    randomBytes: (size) => {
      counter++;
      return new Uint8Array(size).map((_, i) => (counter * 31 + i) % 256);
    },
  });

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
});

afterAll(async () => {
  await store?.close();
});

beforeEach(async () => {
  // Each test starts with no endpoints and the outbox cursor at the end of the log.
  await store.exec(`DELETE FROM webhook_endpoints;
    UPDATE webhook_cursors SET (tx, event_id) = (SELECT tx, id FROM events ORDER BY tx DESC, id DESC LIMIT 1)
    WHERE EXISTS (SELECT 1 FROM events);`);
});

type Received = { url: string; headers: Record<string, string>; body: string };

/** A receiver as a `fetch`: answers each request with the next status (the last one repeats). */
function receiver(statuses: number[] = [200]) {
  const received: Received[] = [];
  let i = 0;
  const fetch: WebhookFetch = async (url, init) => {
    received.push({
      url,
      headers: Object.fromEntries(Object.entries(init.headers as Record<string, string>)),
      body: String(init.body),
    });
    const status = statuses[Math.min(i++, statuses.length - 1)] ?? 200;
    return new Response(status === 200 ? "ok" : "receiver says no", { status });
  };
  return { fetch, received };
}

function worker(fetch: WebhookFetch, clock: { now(): number }, extra: Partial<WebhookWorkerOptions> = {}) {
  return createWebhookWorker({
    store,
    clock,
    logger,
    fetch,
    targets,
    secrets,
    random: () => 0,
    retry: { baseMs: 1_000, capMs: 8_000, maxAttempts: 5, jitter: 0.5 },
    ...extra,
  });
}

/**
 * Appends an event and, unless told not to, waits until the outbox may read it: on a PostgreSQL
 * server shared with other work, a transaction that started earlier and is still running holds it
 * back (see migration 0020), and the tests below drive the worker one round at a time.
 */
async function recordEvent(
  type: string,
  data: Record<string, unknown>,
  options: { waitUntilReadable?: boolean } = {},
): Promise<number> {
  const [row] = await store.query<{ id: string }>(
    "INSERT INTO events (type, data) VALUES ($1, $2) RETURNING id",
    [type, data],
  );
  const id = Number(row!.id);
  if (options.waitUntilReadable !== false) {
    const readable = async () => {
      const [r] = await store.query<{ ok: boolean }>(
        "SELECT tx < pg_snapshot_xmin(pg_current_snapshot()) AS ok FROM events WHERE id = $1",
        [id],
      );
      return r?.ok === true;
    };
    while (!(await readable())) await new Promise((r) => setTimeout(r, 5));
  }
  return id;
}

const settled = (payTo: string, amount = "500000") => ({
  nonce: `0x${"1".repeat(64)}`,
  payer: "0x00000000000000000000000000000000000000cc",
  payTo,
  amount,
  source: "tollgate",
});

describe("webhook fan-out", () => {
  it("delivers each event to the endpoints of the provider it concerns, filtered by type", async () => {
    const clock = createFixedClock(START);
    const all = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    const onlySubs = await repository().create(
      provider,
      { url: "https://b.example/hooks", events: ["subscription.created"] },
      new Date(START),
    );
    await repository().create(otherProvider, { url: "https://c.example/hooks" }, new Date(START));
    const { fetch, received } = receiver();

    const payment = await recordEvent("payment.settled", settled(provider));
    // Subscription events name their provider; a checksummed address routes the same.
    const sub = await recordEvent("subscription.created", {
      provider: "0x00000000000000000000000000000000000000AA",
      subscriptionId: "7",
    });
    await recordEvent("internal.unlisted", { provider });

    const round = await worker(fetch, clock).runOnce();
    expect(round).toEqual({ enqueued: 3, attempted: 3, delivered: 3, dead: 0 });
    const byUrl = received.map((r) => [r.url, (JSON.parse(r.body) as WebhookEvent).id]).sort();
    expect(byUrl).toEqual(
      [
        ["https://a.example/hooks", `evt_${payment}`],
        ["https://a.example/hooks", `evt_${sub}`],
        ["https://b.example/hooks", `evt_${sub}`],
      ].sort(),
    );

    const secrets = new Map([
      ["https://a.example/hooks", all.secret],
      ["https://b.example/hooks", onlySubs.secret],
    ]);
    for (const r of received) {
      const event = verifyWebhook(secrets.get(r.url)!, r.headers, r.body, { clock });
      expect(event.created).toBeGreaterThan(0);
      if (event.id === `evt_${payment}`) {
        expect(event).toMatchObject({ type: "payment.settled", data: { amount: "500000", payTo: provider } });
      }
    }
    expect(received[0]?.headers["content-type"]).toBe("application/json");
  });

  it("delivers the token's own events to every provider's endpoints that take them", async () => {
    const clock = createFixedClock(START);
    await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    await repository().create(
      provider,
      { url: "https://b.example/hooks", events: ["payment.settled"] },
      new Date(START),
    );
    await repository().create(otherProvider, { url: "https://c.example/hooks" }, new Date(START));
    const { fetch, received } = receiver();
    const token = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
    const paused = await recordEvent("token.paused", {
      network: "eip155:84532",
      token,
      since: 1_764_900_000,
    });

    await worker(fetch, clock).runOnce();
    expect(received.map((r) => [r.url, (JSON.parse(r.body) as WebhookEvent).id]).sort()).toEqual(
      [
        ["https://a.example/hooks", `evt_${paused}`],
        ["https://c.example/hooks", `evt_${paused}`],
      ].sort(),
    );
    expect(JSON.parse(received[0]!.body)).toMatchObject({ type: "token.paused", data: { token } });
  });

  it("does not send an endpoint the events that happened before it was registered", async () => {
    await recordEvent("payment.settled", settled(provider));
    await store.query("SELECT pg_sleep(0.01)");
    await repository().create(provider, { url: "https://late.example/hooks" }, new Date(START));
    const after = await recordEvent("payment.settled", settled(provider));
    const { fetch, received } = receiver();
    await worker(fetch, createFixedClock(START)).runOnce();
    expect(received.map((r) => (JSON.parse(r.body) as WebhookEvent).id)).toEqual([`evt_${after}`]);
  });

  it("neither skips nor re-enqueues events across a restart of the worker", async () => {
    const clock = createFixedClock(START);
    await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    const { fetch, received } = receiver();
    const ids: number[] = [];
    for (let i = 0; i < 7; i++)
      ids.push(await recordEvent("payment.settled", settled(provider, String(i + 1))));

    // A first worker reads in batches of 3, then stops after fanning out part of the log.
    const first = worker(fetch, clock, { fanOutBatchSize: 3 });
    expect(await first.fanOut()).toBe(7);
    await first.stop();
    for (let i = 0; i < 3; i++)
      ids.push(await recordEvent("payment.settled", settled(provider, String(i + 8))));

    const second = worker(fetch, clock, { fanOutBatchSize: 3 });
    expect(await second.runOnce()).toMatchObject({ enqueued: 3, delivered: 10 });
    expect(await second.runOnce()).toEqual({ enqueued: 0, attempted: 0, delivered: 0, dead: 0 });
    const delivered = received.map((r) => (JSON.parse(r.body) as WebhookEvent).id).sort();
    expect(delivered).toEqual(ids.map((id) => `evt_${id}`).sort());
  });

  it("reads the outbox in transaction id order as a number, so a batch never skips an event", async () => {
    const clock = createFixedClock(START);
    const own = "0x00000000000000000000000000000000000000dd";
    await repository().create(own, { url: "https://order.example/hooks" }, new Date(START));
    const { fetch, received } = receiver();
    // Transaction ids 9 and 10, written explicitly (long finished on any store), the cursor before
    // both: as text "10" sorts before "9", and a batch of one ending at 10 would pass 9 for good.
    await store.query("UPDATE webhook_cursors SET (tx, event_id) = ('8', 0)");
    const ids: number[] = [];
    for (const tx of ["10", "9"]) {
      const [row] = await store.query<{ id: string }>(
        "INSERT INTO events (type, data, tx) VALUES ('payment.settled', $1, $2) RETURNING id",
        [settled(own), tx],
      );
      ids.push(Number(row!.id));
    }
    await worker(fetch, clock, { fanOutBatchSize: 1 }).runOnce();
    const delivered = received.map((r) => (JSON.parse(r.body) as WebhookEvent).id);
    expect(delivered.sort()).toEqual(ids.map((id) => `evt_${id}`).sort());
  });

  it.skipIf(process.env.DATABASE_URL === undefined)(
    "does not pass an event whose transaction commits after a later event's (PostgreSQL)",
    async () => {
      const clock = createFixedClock(START);
      await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
      const { fetch, received } = receiver();
      const w = worker(fetch, clock);
      let commit!: () => void;
      const held = new Promise<void>((resolve) => {
        commit = resolve;
      });
      let slowId = 0;
      // The slow transaction takes its event id first and commits last.
      const slow = store.transaction(async (tx) => {
        const [row] = await tx.query<{ id: string }>(
          "INSERT INTO events (type, data) VALUES ('payment.settled', $1) RETURNING id",
          [settled(provider, "1")],
        );
        slowId = Number(row!.id);
        await held;
      });
      while (slowId === 0) await new Promise((r) => setTimeout(r, 5));
      // Not readable while the slow transaction runs: that is the point.
      const fastId = await recordEvent("payment.settled", settled(provider, "2"), {
        waitUntilReadable: false,
      });
      expect(fastId).toBeGreaterThan(slowId);

      await w.runOnce();
      commit();
      await slow;
      // The readable horizon is server-wide: transactions of other suites sharing this PostgreSQL
      // server may hold it back for a moment, so look again until both are through (bounded).
      for (let i = 0; i < 100 && received.length < 2; i++) {
        await w.runOnce();
        if (received.length < 2) await new Promise((r) => setTimeout(r, 100));
      }
      const delivered = received.map((r) => (JSON.parse(r.body) as WebhookEvent).id).sort();
      expect(delivered).toEqual([`evt_${slowId}`, `evt_${fastId}`].sort());
    },
  );
});

describe("webhook delivery", () => {
  it("retries with exponential backoff on the injected clock, then dead-letters, and can be requeued", async () => {
    const clock = createFixedClock(START);
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    await recordEvent("payment.settled", settled(provider));
    const { fetch, received } = receiver([500, 503, 404, 302, 500, 200]);
    // random = 0 takes no jitter off: delays are exactly 1 s, 2 s, 4 s, 8 s (the cap).
    const w = worker(fetch, clock);

    const attemptTimes: number[] = [];
    let dead = 0;
    for (let i = 0; i < 5; i++) {
      const round = await w.runOnce();
      expect(round.attempted).toBe(1);
      attemptTimes.push(clock.now());
      dead += round.dead;
      const [d] = await repository().listDeliveries(provider, endpoint.id, { limit: 20 });
      if (i < 4) {
        const due = Date.parse(d!.nextAttemptAt!);
        // Nothing is sent before it is due.
        clock.set(due - 1);
        expect((await w.runOnce()).attempted).toBe(0);
        clock.set(due);
      }
    }
    expect(attemptTimes.map((t) => t - START)).toEqual([0, 1_000, 3_000, 7_000, 15_000]);
    expect(dead).toBe(1);
    const [deadLetter] = await repository().listDeliveries(provider, endpoint.id, {
      limit: 20,
      status: "dead",
    });
    expect(deadLetter).toMatchObject({ status: "dead", attempts: 5, nextAttemptAt: null });
    expect(deadLetter!.history.map((h) => h.statusCode)).toEqual([500, 302, 404, 503, 500]);
    // The status line only: a receiver's body is never recorded (it may be an internal service's).
    expect(deadLetter!.history[0]?.error).toBe("HTTP 500");
    expect(deadLetter!.history.map((h) => Date.parse(h.at) - START)).toEqual([
      15_000, 7_000, 3_000, 1_000, 0,
    ]);

    clock.advance(3_600_000);
    expect((await w.runOnce()).attempted).toBe(0);
    const requeued = await repository().retryDelivery(
      provider,
      endpoint.id,
      deadLetter!.id,
      new Date(clock.now()),
    );
    expect(requeued).toMatchObject({ status: "pending", attempts: 0 });
    expect(await w.runOnce()).toMatchObject({ attempted: 1, delivered: 1 });
    const [done] = await repository().listDeliveries(provider, endpoint.id, { limit: 20 });
    expect(done).toMatchObject({
      status: "delivered",
      attempts: 1,
      deliveredAt: new Date(clock.now()).toISOString(),
    });
    expect(received).toHaveLength(6);
    // Every attempt carried the same event id, for the receiver's de-duplication.
    expect(new Set(received.map((r) => (JSON.parse(r.body) as WebhookEvent).id)).size).toBe(1);
  });

  it("refuses to requeue a delivery that is still queued", async () => {
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    await recordEvent("payment.settled", settled(provider));
    await worker(receiver().fetch, createFixedClock(START)).fanOut();
    const [queued] = await repository().listDeliveries(provider, endpoint.id, { limit: 1 });
    expect(queued?.status).toBe("pending");
    await expect(
      repository().retryDelivery(provider, endpoint.id, queued!.id, new Date(START)),
    ).rejects.toMatchObject({
      code: "InvalidRequest",
      details: { reason: "already_queued" },
    });
  });

  it("takes a random share of up to `jitter` off each delay", async () => {
    const clock = createFixedClock(START);
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    await recordEvent("payment.settled", settled(provider));
    const w = worker(receiver([500]).fetch, clock, { random: () => 0.5 });
    await w.runOnce();
    const [d] = await repository().listDeliveries(provider, endpoint.id, { limit: 1 });
    // 1 000 ms less half of the 50 % jitter.
    expect(Date.parse(d!.nextAttemptAt!) - START).toBe(750);
  });

  it("counts a refused connection and a timeout as failures", async () => {
    const clock = createFixedClock(START);
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    await recordEvent("payment.settled", settled(provider));
    let calls = 0;
    const fetch: WebhookFetch = (_url, init) => {
      calls++;
      if (calls === 1)
        return Promise.reject(new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } }));
      // Never answers; only the worker's timeout ends it.
      return new Promise((_, reject) => {
        init.signal?.addEventListener("abort", () => reject(init.signal?.reason));
      });
    };
    const w = worker(fetch, clock, { timeoutMs: 20 });
    await w.runOnce();
    clock.advance(1_000);
    await w.runOnce();
    const [d] = await repository().listDeliveries(provider, endpoint.id, { limit: 1 });
    expect(d!.history.map((h) => [h.statusCode, h.error])).toEqual([
      [null, "no response within 20 ms"],
      [null, "fetch failed: ECONNREFUSED"],
    ]);
    expect(d!.status).toBe("pending");
  });

  it("sends again when a worker dies holding a delivery, once its lease expires", async () => {
    const clock = createFixedClock(START);
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    const eventId = await recordEvent("payment.settled", settled(provider));
    const ids: string[] = [];
    let release!: () => void;
    const stuck = new Promise<void>((resolve) => {
      release = resolve;
    });
    // The first worker's request hangs (its process is as good as dead).
    const hanging: WebhookFetch = async (_url, init) => {
      ids.push((JSON.parse(String(init.body)) as WebhookEvent).id);
      await stuck;
      return new Response("late", { status: 200 });
    };
    const first = worker(hanging, clock, { leaseMs: 60_000, timeoutMs: 120_000 });
    const firstRound = first.runOnce();
    while (ids.length === 0) await new Promise((r) => setTimeout(r, 5));

    const { fetch, received } = receiver();
    const second = worker(fetch, clock);
    expect((await second.runOnce()).attempted).toBe(0);
    clock.advance(60_000);
    expect(await second.runOnce()).toMatchObject({ attempted: 1, delivered: 1 });

    // The first worker's late answer finds its lease gone and records nothing.
    release();
    expect(await firstRound).toMatchObject({ attempted: 1, delivered: 0 });
    expect([...ids, ...received.map((r) => (JSON.parse(r.body) as WebhookEvent).id)]).toEqual([
      `evt_${eventId}`,
      `evt_${eventId}`,
    ]);
    const [d] = await repository().listDeliveries(provider, endpoint.id, { limit: 1 });
    expect(d).toMatchObject({ status: "delivered", attempts: 2 });
    expect(d!.history).toHaveLength(1);
  });

  it("shares the queue between two workers without sending any delivery twice", async () => {
    const clock = createFixedClock(START);
    await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    const ids: number[] = [];
    for (let i = 0; i < 40; i++)
      ids.push(await recordEvent("payment.settled", settled(provider, String(i + 1))));
    const { fetch, received } = receiver();
    const slowFetch: WebhookFetch = async (url, init, target) => {
      await new Promise((r) => setTimeout(r, 1));
      return fetch(url, init, target);
    };
    const a = worker(slowFetch, clock, { concurrency: 4, fanOutBatchSize: 7 });
    const b = worker(slowFetch, clock, { concurrency: 4, fanOutBatchSize: 7 });
    const rounds = await Promise.all([a.runOnce(), b.runOnce()]);
    expect(rounds[0].enqueued + rounds[1].enqueued).toBe(40);
    expect(rounds[0].delivered + rounds[1].delivered).toBe(40);
    const delivered = received.map((r) => (JSON.parse(r.body) as WebhookEvent).id).sort();
    expect(delivered).toEqual(ids.map((id) => `evt_${id}`).sort());
  });

  it("signs with the old secret as well during a rotation's grace period", async () => {
    const clock = createFixedClock(START);
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    const rotated = await repository().rotateSecret(provider, endpoint.id, 60, new Date(START));
    await recordEvent("payment.settled", settled(provider));
    await recordEvent("payment.settled", settled(provider));
    const { fetch, received } = receiver();
    const w = worker(fetch, clock);
    await w.fanOut();
    await store.query(
      "UPDATE webhook_deliveries SET next_attempt_at = $1 WHERE id = (SELECT max(id) FROM webhook_deliveries)",
      [new Date(START + 61_000)],
    );
    await w.deliverDue();
    clock.set(START + 61_000);
    await w.deliverDue();
    expect(received).toHaveLength(2);
    const [during, after] = received;
    expect(during!.headers["Tollgate-Signature"]?.match(/v1=/g)).toHaveLength(2);
    expect(verifyWebhook(endpoint.secret, during!.headers, during!.body, { clock }).type).toBe(
      "payment.settled",
    );
    expect(verifyWebhook(rotated.secret, during!.headers, during!.body, { clock }).type).toBe(
      "payment.settled",
    );
    expect(after!.headers["Tollgate-Signature"]?.match(/v1=/g)).toHaveLength(1);
    expect(() => verifyWebhook(endpoint.secret, after!.headers, after!.body, { clock })).toThrow(
      /no signature/,
    );
  });

  it("stops delivering to a deleted endpoint", async () => {
    const clock = createFixedClock(START);
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    await recordEvent("payment.settled", settled(provider));
    const { fetch, received } = receiver([500]);
    const w = worker(fetch, clock);
    await w.runOnce();
    await repository().remove(provider, endpoint.id);
    clock.advance(60_000);
    expect((await w.runOnce()).attempted).toBe(0);
    expect(received).toHaveLength(1);
  });

  it("prunes finished deliveries past the retention, keeping queued ones and not re-enqueueing", async () => {
    const clock = createFixedClock(START);
    const endpoint = await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    await recordEvent("payment.settled", settled(provider));
    const w = worker(receiver([200, 500]).fetch, clock, { retentionMs: 86_400_000 });
    await w.runOnce();
    await recordEvent("payment.settled", settled(provider));
    await w.runOnce();
    expect(
      (await repository().listDeliveries(provider, endpoint.id, { limit: 10 })).map((d) => d.status),
    ).toEqual(["pending", "delivered"]);
    clock.advance(86_400_000 - 1);
    expect(await w.prune()).toBe(0);
    clock.advance(1);
    expect(await w.prune()).toBe(0);
    clock.advance(1);
    expect(await w.prune()).toBe(1);
    expect(
      (await repository().listDeliveries(provider, endpoint.id, { limit: 10 })).map((d) => d.status),
    ).toEqual(["pending"]);
    expect(await w.fanOut()).toBe(0);
  });

  it.skipIf(process.env.DATABASE_URL === undefined)(
    "in the background, looks again soon at an event a running transaction held back, not at the 30 s backstop (PostgreSQL)",
    async () => {
      await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
      const { fetch, received } = receiver();
      const w = worker(fetch, createFixedClock(START));
      w.start();
      try {
        let commit!: () => void;
        const held = new Promise<void>((resolve) => {
          commit = resolve;
        });
        let started = false;
        // Another transaction with an id, as another suite's or instance's on the same server: it
        // holds the readable horizon back while the event commits and its notification is heard.
        const blocker = store.transaction(async (tx) => {
          await tx.query("SELECT pg_current_xact_id()");
          started = true;
          await held;
        });
        while (!started) await new Promise((r) => setTimeout(r, 5));
        const id = await recordEvent("payment.settled", settled(provider), { waitUntilReadable: false });
        await new Promise((r) => setTimeout(r, 300));
        expect(received).toEqual([]);
        commit();
        await blocker;
        const deadline = Date.now() + 10_000;
        while (received.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        expect(received.map((r) => (JSON.parse(r.body) as WebhookEvent).id)).toEqual([`evt_${id}`]);
      } finally {
        await w.stop();
      }
    },
  );

  it("runs in the background and delivers new events until stopped", async () => {
    await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    const { fetch, received } = receiver();
    const w = worker(fetch, createFixedClock(START), { pollIntervalMs: 10 });
    w.start();
    const id = await recordEvent("payment.settled", settled(provider));
    while (received.length === 0) await new Promise((r) => setTimeout(r, 10));
    await w.stop();
    expect((JSON.parse(received[0]!.body) as WebhookEvent).id).toBe(`evt_${id}`);
  });

  it("runs no round per event while no endpoint exists, and wakes at once when one is registered", async () => {
    const { fetch, received } = receiver();
    let statements = 0;
    const counted = new Proxy(store, {
      get(target, key, receiverOf) {
        const value = Reflect.get(target, key, receiverOf) as unknown;
        if (typeof value !== "function") return value;
        const fn = value as (...args: unknown[]) => unknown;
        if (key === "query" || key === "transaction") {
          return (...args: unknown[]) => {
            statements++;
            return fn.apply(target, args);
          };
        }
        return fn.bind(target);
      },
    });
    // No statement for a whole second: the worker's round (if any) is over, also on a loaded machine.
    const quiet = async () => {
      for (let last = -1; last !== statements; ) {
        last = statements;
        await new Promise((r) => setTimeout(r, 1_000));
      }
    };
    // A backstop far away: only notifications can start a round in this test.
    const w = worker(fetch, createFixedClock(START), { store: counted, pollIntervalMs: 600_000 });
    w.start();
    await expect.poll(() => statements).toBeGreaterThan(0);
    await quiet();
    const before = statements;
    for (let i = 0; i < 10; i++) await recordEvent("payment.settled", settled(provider));
    await quiet();
    expect(statements - before).toBe(0);

    // A registration (migration 0185's notification) wakes it: the next event is delivered at once,
    // and the ten before the endpoint existed are not sent to it.
    await repository().create(provider, { url: "https://a.example/hooks" }, new Date(START));
    const id = await recordEvent("payment.settled", settled(provider));
    await expect.poll(() => received.length, { timeout: 20_000 }).toBe(1);
    await w.stop();
    expect((JSON.parse(received[0]!.body) as WebhookEvent).id).toBe(`evt_${id}`);
  });
});
