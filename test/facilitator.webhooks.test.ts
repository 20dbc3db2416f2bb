/**
 * Webhooks end to end (docs/webhooks.md): real payments settled by a real facilitator on a devnet, the
 * `payment.settled` events delivered by its built-in outbox worker to a real local HTTP receiver and
 * checked there with `verifyWebhook`. The facilitator runs on a fixed clock that only the test moves,
 * so every retry happens when the test says it is due, and the attempt times show the backoff.
 */
import { lookup } from "node:dns/promises";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { webhooksCommand } from "../src/cli/commands/webhooks.ts";
import { createFacilitator, type Facilitator, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import {
  CreateWebhookResponseSchema,
  ListWebhookDeliveriesResponseSchema,
  ListWebhooksResponseSchema,
  type WebhookDelivery,
} from "../src/facilitator/webhooks/webhookApi.ts";
import { defaultWebhookRetryPolicy } from "../src/facilitator/webhooks/webhookBackoff.ts";
import { verifyWebhook } from "../src/gate/verifyWebhook.ts";
import { createFixedClock } from "../src/protocol/clock.ts";
import { memoNonce } from "../src/protocol/memo.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";

type FixedClock = ReturnType<typeof createFixedClock>;

const webhookSecretKey = new Uint8Array(32).fill(5);

/** DNS for the endpoints API tests: `*.example` (reserved, resolves nowhere) answers a public address. */
const exampleDns = async (hostname: string) =>
  hostname.endsWith(".example")
    ? [{ address: "93.184.215.14", family: 4 as const }]
    : (await lookup(hostname, { all: true })).map((a) => ({
        address: a.address,
        family: a.family === 6 ? (6 as const) : (4 as const),
      }));
type RunningFacilitator = { facilitator: Facilitator; url: string; stop(): Promise<void> };

let devnet: Devnet;
let payer: DevnetAccount;
/**
 * One store for the file (opening a PGlite database costs seconds); each test has its own provider,
 * so tests do not see each other's endpoints or events.
 */
let store: Store;

beforeAll(async () => {
  [devnet, store] = await Promise.all([
    startDevnet({ accounts: 8 }),
    createTestStore({ databaseUrl: process.env.DATABASE_URL }),
  ]);
  payer = devnet.accounts[1]!;
});

afterAll(async () => {
  await devnet?.stop();
  await store?.close();
});

/** A facilitator with the built-in modules (webhooks among them) on the given clock and store. */
async function startFacilitator(clock: FixedClock, store: Store): Promise<RunningFacilitator> {
  const facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[devnet.accounts.length - 1]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    clock,
    // The receivers below listen on loopback, which webhooks refuse unless allowed; one sealing key
    // for every facilitator started on this store, as a restart with the configured key would have.
    // The worker re-reads every 100 ms instead of every second while deliveries wait: the clock
    // only moves when the test moves it, and each of a test's rounds would otherwise wait a second
    // (a busy CI machine stretched one test's eight rounds past its time limit).
    webhooks: {
      allowTargets: ["127.0.0.0/8"],
      secretKeys: [webhookSecretKey],
      lookup: exampleDns,
      pollIntervalMs: 100,
    },
  });
  await facilitator.start();
  const server = await serveApp(facilitator.app);
  return {
    facilitator,
    url: server.url,
    async stop() {
      await server.close();
      await facilitator.stop();
    },
  };
}

async function call(url: string, method: string, path: string, body?: unknown, apiKey?: string) {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;
  const response = await fetch(`${url}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** Registers `account` as a provider (signed challenge) and returns its API key. */
async function registerProvider(url: string, account: DevnetAccount): Promise<string> {
  const challenge = await call(url, "POST", "/providers/challenge", { address: account.address });
  const text = challenge.body.challenge as string;
  const signature = await account.account.signMessage({ message: text });
  const registered = await call(url, "POST", "/providers", {
    address: account.address,
    challenge: text,
    signature,
  });
  expect(registered.status).toBe(201);
  return registered.body.apiKey as string;
}

async function pay(url: string, payTo: DevnetAccount, amount: bigint) {
  const signedPayment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount });
  const response = await call(url, "POST", "/authorize", { signedPayment });
  expect(response.status).toBe(200);
  return { amount, nonce: memoNonce(signedPayment.memo) };
}

async function deliveries(url: string, apiKey: string, endpointId: string): Promise<WebhookDelivery[]> {
  const response = await call(url, "GET", `/webhooks/${endpointId}/deliveries?limit=100`, undefined, apiKey);
  expect(response.status).toBe(200);
  return ListWebhookDeliveriesResponseSchema.parse(response.body).deliveries;
}

/** Polls until `check` holds (the worker runs on its own schedule); fails after `timeoutMs`. */
async function waitFor<T>(
  what: string,
  read: () => Promise<T>,
  check: (value: T) => boolean,
  timeoutMs = 20_000,
) {
  const deadline = Date.now() + timeoutMs;
  let last: T = await read();
  while (!check(last)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 25));
    last = await read();
  }
  return last;
}

/** A request as received, with the facilitator clock's time at receipt (when a receiver verifies it). */
type Received = { headers: IncomingHttpHeaders; body: string; at: FixedClock };

/** A real HTTP receiver that can be taken down (connections refused) and brought back on its port. */
async function startReceiver(clock: FixedClock) {
  const received: Received[] = [];
  const state = { status: 200 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      received.push({
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
        at: createFixedClock(clock.now()),
      });
      res
        .writeHead(state.status, { "content-type": "text/plain" })
        .end(state.status === 200 ? "thanks" : "try later");
    });
  });
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
    });
  const port = await listen(0);
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    state,
    down: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
    up: () => listen(port),
  };
}

describe("webhook delivery over a real facilitator", { timeout: 90_000 }, () => {
  it("delivers every event to a receiver that was down, once it is back, signed, with backoff on the clock", async () => {
    const clock = createFixedClock(Date.now());
    const running = await startFacilitator(clock, store);
    const receiver = await startReceiver(clock);
    try {
      const provider = devnet.accounts[2]!;
      const apiKey = await registerProvider(running.url, provider);
      const created = await call(running.url, "POST", "/webhooks", { url: receiver.url }, apiKey);
      expect(created.status).toBe(201);
      const endpoint = CreateWebhookResponseSchema.parse(created.body);
      await receiver.down();

      const payments = [
        await pay(running.url, provider, 100_000n),
        await pay(running.url, provider, 200_000n),
      ];
      payments.push(await pay(running.url, provider, 300_000n));

      // Each payment's event is tried at once and fails: the receiver refuses connections.
      let current = await waitFor(
        "first attempts",
        () => deliveries(running.url, apiKey, endpoint.id),
        (ds) => ds.length === 3 && ds.every((d) => d.attempts === 1 && d.status === "pending"),
      );
      expect(current.every((d) => d.history[0]?.statusCode === null)).toBe(true);

      // Three more failed rounds, each when the clock reaches the scheduled time.
      const { baseMs, jitter } = defaultWebhookRetryPolicy;
      for (let failed = 1; failed <= 3; failed++) {
        const ceiling = baseMs * 2 ** (failed - 1);
        for (const d of current) {
          const gap = Date.parse(d.nextAttemptAt!) - Date.parse(d.history[0]!.at);
          expect(gap).toBeGreaterThan(ceiling * (1 - jitter));
          expect(gap).toBeLessThanOrEqual(ceiling);
        }
        clock.set(Math.max(...current.map((d) => Date.parse(d.nextAttemptAt!))));
        current = await waitFor(
          `attempt ${failed + 1}`,
          () => deliveries(running.url, apiKey, endpoint.id),
          (ds) => ds.every((d) => d.attempts === failed + 1 && d.status === "pending"),
        );
      }
      expect(receiver.received).toHaveLength(0);

      await receiver.up();
      clock.set(Math.max(...current.map((d) => Date.parse(d.nextAttemptAt!))));
      current = await waitFor(
        "delivery after the receiver came back",
        () => deliveries(running.url, apiKey, endpoint.id),
        (ds) => ds.every((d) => d.status === "delivered"),
      );

      // Attempt times are the clock's, and the gaps between them double (within the jitter).
      for (const d of current) {
        const times = d.history.map((h) => Date.parse(h.at)).reverse();
        expect(times).toHaveLength(5);
        const gaps = times.slice(1).map((t, i) => t - times[i]!);
        gaps.slice(0, 3).forEach((gap, i) => {
          expect(gap).toBeGreaterThan(baseMs * 2 ** i * (1 - jitter));
          expect(gap).toBeLessThanOrEqual(baseMs * 2 ** i);
        });
        expect(d.history.map((h) => h.statusCode)).toEqual([200, null, null, null, null]);
      }

      expect(receiver.received).toHaveLength(3);
      const events = receiver.received.map((r) =>
        verifyWebhook(endpoint.secret, r.headers, r.body, { clock: r.at }),
      );
      expect(new Set(events.map((e) => e.id)).size).toBe(3);
      expect(events.map((e) => e.type)).toEqual(["payment.settled", "payment.settled", "payment.settled"]);
      const byNonce = new Map(events.map((e) => [e.data.nonce, e.data]));
      for (const p of payments) {
        expect(byNonce.get(p.nonce)).toMatchObject({
          amount: p.amount.toString(),
          payTo: provider.address.toLowerCase(),
          payer: payer.address.toLowerCase(),
        });
      }
    } finally {
      await receiver.down().catch(() => {});
      await running.stop();
    }
  });

  it("dead-letters a delivery after the last attempt and delivers it when requeued by hand", async () => {
    const clock = createFixedClock(Date.now());
    const running = await startFacilitator(clock, store);
    const receiver = await startReceiver(clock);
    receiver.state.status = 500;
    try {
      const provider = devnet.accounts[3]!;
      const apiKey = await registerProvider(running.url, provider);
      const endpoint = CreateWebhookResponseSchema.parse(
        (
          await call(
            running.url,
            "POST",
            "/webhooks",
            { url: receiver.url, events: ["payment.settled"] },
            apiKey,
          )
        ).body,
      );
      await pay(running.url, provider, 50_000n);

      const { maxAttempts } = defaultWebhookRetryPolicy;
      for (let attempt = 1; attempt <= maxAttempts; attempt++) {
        const [d] = await waitFor(
          `attempt ${attempt}`,
          () => deliveries(running.url, apiKey, endpoint.id),
          (ds) => ds[0]?.attempts === attempt && ds[0].status !== "sending",
        );
        if (attempt < maxAttempts) {
          expect(d!.status).toBe("pending");
          clock.set(Date.parse(d!.nextAttemptAt!));
        } else {
          expect(d!.status).toBe("dead");
          expect(d!.nextAttemptAt).toBeNull();
        }
      }
      expect(receiver.received).toHaveLength(maxAttempts);
      const [dead] = await deliveries(running.url, apiKey, endpoint.id);
      // The status line only, never the receiver's body ("try later").
      expect(dead!.history[0]).toMatchObject({ statusCode: 500, error: "HTTP 500 Internal Server Error" });

      // A dead letter stays put however long one waits.
      clock.advance(30 * 86_400_000);
      const retryPath = `/webhooks/${endpoint.id}/deliveries/${dead!.id}/retry`;
      receiver.state.status = 200;
      const retried = await call(running.url, "POST", retryPath, undefined, apiKey);
      expect(retried.status).toBe(200);
      expect(retried.body.delivery).toMatchObject({ id: dead!.id, status: "pending", attempts: 0 });
      await waitFor(
        "the requeued delivery",
        () => deliveries(running.url, apiKey, endpoint.id),
        (ds) => ds[0]?.status === "delivered",
      );
      expect(receiver.received).toHaveLength(maxAttempts + 1);
      const ids = new Set(receiver.received.map((r) => (JSON.parse(r.body) as { id: string }).id));
      expect(ids.size).toBe(1);
      const last = receiver.received.at(-1)!;
      expect(verifyWebhook(endpoint.secret, last.headers, last.body, { clock: last.at }).type).toBe(
        "payment.settled",
      );
    } finally {
      await receiver.down().catch(() => {});
      await running.stop();
    }
  });

  it("loses and duplicates nothing when the facilitator restarts with deliveries queued", async () => {
    const clock = createFixedClock(Date.now());
    const receiver = await startReceiver(clock);
    await receiver.down();
    const provider = devnet.accounts[4]!;
    let running = await startFacilitator(clock, store);
    try {
      const apiKey = await registerProvider(running.url, provider);
      const endpoint = CreateWebhookResponseSchema.parse(
        (await call(running.url, "POST", "/webhooks", { url: receiver.url }, apiKey)).body,
      );
      const nonces = [
        (await pay(running.url, provider, 1_000n)).nonce,
        (await pay(running.url, provider, 2_000n)).nonce,
      ];
      await waitFor(
        "first attempts",
        () => deliveries(running.url, apiKey, endpoint.id),
        (ds) => ds.length === 2 && ds.every((d) => d.attempts === 1 && d.status === "pending"),
      );
      await running.stop();

      // While no worker runs, another instance sharing the store records an event.
      await running.facilitator.context.recordEvent(store, "payment.settled", {
        nonce: `0x${"ab".repeat(32)}`,
        payTo: provider.address.toLowerCase(),
        payer: payer.address.toLowerCase(),
        amount: "3000",
        source: "tollgate",
      });
      nonces.push(`0x${"ab".repeat(32)}`);

      running = await startFacilitator(clock, store);
      await receiver.up();
      nonces.push((await pay(running.url, provider, 4_000n)).nonce);
      // New events are tried at once (the worker wakes for them); the clock moves only once no attempt
      // is under way, for the retries that wait, so each delivery is signed and received at one time.
      await waitFor(
        "an attempt of every delivery",
        () => deliveries(running.url, apiKey, endpoint.id),
        (ds) => ds.length === 4 && ds.every((d) => d.attempts >= 1 && d.status !== "sending"),
      );
      clock.advance(defaultWebhookRetryPolicy.capMs);
      const done = await waitFor(
        "every delivery after the restart",
        () => deliveries(running.url, apiKey, endpoint.id),
        (ds) => ds.length === 4 && ds.every((d) => d.status === "delivered"),
      );
      expect(done.every((d) => d.history.filter((h) => h.statusCode === 200).length === 1)).toBe(true);
      const received = receiver.received.map((r) =>
        verifyWebhook(endpoint.secret, r.headers, r.body, { clock: r.at }),
      );
      expect(received.map((e) => e.data.nonce).sort()).toEqual([...nonces].sort());
      const rows = await store.query(
        "SELECT endpoint_id, event_id FROM webhook_deliveries WHERE endpoint_id = $1",
        [endpoint.id],
      );
      expect(rows).toHaveLength(4);
    } finally {
      await receiver.down().catch(() => {});
      await running.stop();
    }
  });
});

describe("webhook endpoints API", () => {
  let running: RunningFacilitator;
  let keyA: string;
  let keyB: string;

  beforeAll(async () => {
    running = await startFacilitator(createFixedClock(Date.now()), store);
    keyA = await registerProvider(running.url, devnet.accounts[5]!);
    keyB = await registerProvider(running.url, devnet.accounts[6]!);
  });

  afterAll(async () => {
    await running?.stop();
  });

  it("refuses requests without a provider API key", async () => {
    const response = await call(running.url, "GET", "/webhooks");
    expect(response).toMatchObject({ status: 401, body: { error: { code: "Unauthorized" } } });
    expect(
      (await call(running.url, "POST", "/webhooks", { url: "https://x.example" }, "tg_nope")).status,
    ).toBe(401);
  });

  it("registers, lists, rotates and deletes a provider's endpoints, showing the secret only once", async () => {
    const created = await call(
      running.url,
      "POST",
      "/webhooks",
      {
        url: "https://a.example/hooks",
        events: ["payment.settled", "subscription.created"],
        description: "books",
      },
      keyA,
    );
    expect(created.status).toBe(201);
    const endpoint = CreateWebhookResponseSchema.parse(created.body);
    expect(endpoint.secret).toMatch(/^whsec_/);
    expect(endpoint.events).toEqual(["payment.settled", "subscription.created"]);

    const listed = ListWebhooksResponseSchema.parse(
      (await call(running.url, "GET", "/webhooks", undefined, keyA)).body,
    );
    expect(listed.webhooks.map((w) => w.id)).toContain(endpoint.id);
    expect(JSON.stringify(listed)).not.toContain(endpoint.secret);

    const rotated = await call(
      running.url,
      "POST",
      `/webhooks/${endpoint.id}/rotate-secret`,
      { graceSeconds: 3600 },
      keyA,
    );
    expect(rotated.status).toBe(200);
    expect(rotated.body.secret).not.toBe(endpoint.secret);
    expect(rotated.body.previousSecretExpiresAt).not.toBeNull();

    expect((await call(running.url, "DELETE", `/webhooks/${endpoint.id}`, undefined, keyA)).body).toEqual({
      id: endpoint.id,
      deleted: true,
    });
    expect((await call(running.url, "DELETE", `/webhooks/${endpoint.id}`, undefined, keyA)).status).toBe(404);
  });

  it("keeps providers apart: another provider's endpoint is not found", async () => {
    const endpoint = CreateWebhookResponseSchema.parse(
      (await call(running.url, "POST", "/webhooks", { url: "https://a.example/private" }, keyA)).body,
    );
    const listedByB = ListWebhooksResponseSchema.parse(
      (await call(running.url, "GET", "/webhooks", undefined, keyB)).body,
    );
    expect(listedByB.webhooks.map((w) => w.id)).not.toContain(endpoint.id);
    for (const [method, path] of [
      ["DELETE", `/webhooks/${endpoint.id}`],
      ["GET", `/webhooks/${endpoint.id}/deliveries`],
      ["POST", `/webhooks/${endpoint.id}/rotate-secret`],
      ["POST", `/webhooks/${endpoint.id}/deliveries/1/retry`],
    ] as const) {
      expect((await call(running.url, method, path, undefined, keyB)).status).toBe(404);
    }
    expect(
      (await call(running.url, "GET", `/webhooks/${endpoint.id}/deliveries`, undefined, keyA)).status,
    ).toBe(200);
  });

  it.each([
    ["a non-http URL", { url: "ftp://a.example/hooks" }],
    ["a URL with credentials", { url: "https://user:pw@a.example/hooks" }],
    ["an unknown event type", { url: "https://a.example/hooks", events: ["payment.refunded"] }],
    [
      "a repeated event type",
      { url: "https://a.example/hooks", events: ["payment.settled", "payment.settled"] },
    ],
    ["an unknown field", { url: "https://a.example/hooks", secret: "mine" }],
    ["no URL", {}],
  ])("refuses %s with 400 InvalidRequest", async (_, body) => {
    const response = await call(running.url, "POST", "/webhooks", body, keyA);
    expect(response).toMatchObject({ status: 400, body: { error: { code: "InvalidRequest" } } });
  });

  it("answers malformed ids and queries with 4xx, never 500", async () => {
    expect((await call(running.url, "DELETE", "/webhooks/not-an-id", undefined, keyA)).status).toBe(404);
    expect(
      (await call(running.url, "GET", "/webhooks/we_xxxxxxxxxxxxxxxxxx/deliveries?limit=0", undefined, keyA))
        .status,
    ).toBe(400);
    expect(
      (
        await call(
          running.url,
          "GET",
          "/webhooks/we_xxxxxxxxxxxxxxxxxx/deliveries?status=lost",
          undefined,
          keyA,
        )
      ).status,
    ).toBe(400);
    expect(
      (
        await call(
          running.url,
          "POST",
          "/webhooks/we_xxxxxxxxxxxxxxxxxx/deliveries/99999999999999999999/retry",
          undefined,
          keyA,
        )
      ).status,
    ).toBe(404);
    const rotate = await fetch(`${running.url}/webhooks/we_xxxxxxxxxxxxxxxxxx/rotate-secret`, {
      method: "POST",
      headers: { authorization: `Bearer ${keyA}`, "content-type": "application/json" },
      body: "{not json",
    });
    expect(rotate.status).toBe(400);
  });

  it("is driven by `tollgate webhooks` add, list, deliveries, rotate-secret and remove", async () => {
    const cli = async (...argv: string[]) => {
      const out: string[] = [];
      const code = await webhooksCommand(argv, {
        env: { TOLLGATE_FACILITATOR_URL: running.url, TOLLGATE_API_KEY: keyB },
        out: { log: (line) => out.push(line), error: (line) => out.push(line) },
        fetch,
      });
      return { code, text: out.join("\n") };
    };
    const added = await cli(
      "add",
      "https://b.example/hooks",
      "--events",
      "payment.settled,payment.failed",
      "--json",
    );
    expect(added.code).toBe(0);
    const endpoint = CreateWebhookResponseSchema.parse(JSON.parse(added.text));
    expect(endpoint.events).toEqual(["payment.settled", "payment.failed"]);

    const listed = await cli("list");
    expect(listed.text).toContain(endpoint.id);
    expect(listed.text).toContain("payment.settled,payment.failed");
    expect(listed.text).not.toContain(endpoint.secret);
    expect(await cli("deliveries", endpoint.id)).toEqual({ code: 0, text: "no deliveries" });

    const rotated = await cli("rotate-secret", endpoint.id, "--grace", "2h");
    expect(rotated.code).toBe(0);
    expect(rotated.text).toMatch(/^secret {3}whsec_/);
    expect(rotated.text).toContain("the old secret also signs deliveries until");

    expect(await cli("remove", endpoint.id)).toEqual({ code: 0, text: `removed ${endpoint.id}` });
    await expect(cli("remove", endpoint.id)).rejects.toMatchObject({ code: "NotFound" });
    expect((await cli("retry", endpoint.id)).code).toBe(2);
    expect((await cli("frobnicate")).code).toBe(2);
  });
});
