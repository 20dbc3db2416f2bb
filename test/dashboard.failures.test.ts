/**
 * What went wrong, on the provider's pages, over a real store (no chain, no sign-in): the section is
 * mounted on an app whose session is already a provider's, and its pages are read through
 * `app.request()`.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { encodeErrorResult, getAddress, parseAbi } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DashboardEnv } from "../src/facilitator/dashboard/dashboardApp.ts";
import { type ProviderView, providerSection } from "../src/facilitator/dashboard/providerSection.ts";
import { mountWebhookViews } from "../src/facilitator/dashboard/webhookViews.ts";
import { createWebhookRepository } from "../src/facilitator/webhooks/createWebhookRepository.ts";
import { createWebhookSecretBox } from "../src/facilitator/webhooks/webhookSecretBox.ts";
import { base64UrlEncode, utf8Encode } from "../src/protocol/base64.ts";
import { createFixedClock } from "../src/protocol/clock.ts";
import { subscriptionDashboard } from "../src/schemes/subscription/facilitator/subscriptionDashboard.ts";
import { mountSubscriptionViews } from "../src/schemes/subscription/facilitator/subscriptionViews.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { insertTestPayment } from "./support/paymentRows.ts";

const provider = getAddress("0x00000000000000000000000000000000000000aa");
const subscriber = getAddress("0x00000000000000000000000000000000000000bb");
const manager = getAddress("0x00000000000000000000000000000000000000cc");
const token = { decimals: 6, symbol: "USDC" };
const clock = createFixedClock(Date.parse("2026-11-22T12:00:00Z"));
let store: Store;

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
});
afterAll(async () => {
  await store?.close();
});

/** The provider's section on an app whose every request is the provider's signed-in session. */
function providerApp(
  views: readonly ProviderView[],
  planNames?: Parameters<typeof providerSection>[0]["planNames"],
): Hono<DashboardEnv> {
  const app = new Hono<DashboardEnv>();
  app.use("*", async (c, next) => {
    c.set("session", {
      kind: "provider",
      provider,
      keyId: 1,
      csrfToken: "csrf-token",
      expiresAt: new Date(clock.now() + 3_600_000),
    });
    await next();
  });
  providerSection({ store, clock, token, planNames }, views).mount(app);
  return app;
}

async function pageText(app: Hono<DashboardEnv>, path: string): Promise<string> {
  const res = await app.request(`http://dash.test${path}`);
  expect(res.status).toBe(200);
  return res.text();
}

describe("failed renewals", () => {
  it("show the revert decoded to its error and arguments, beside the indexer's message", async () => {
    const reason = encodeErrorResult({
      abi: parseAbi(["error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)"]),
      errorName: "ERC20InsufficientBalance",
      args: [subscriber, 5n, 1_000_000n],
    });
    await store.query("INSERT INTO events (type, data) VALUES ('subscription.renewal_failed', $1)", [
      {
        provider: provider.toLowerCase(),
        subscriptionId: "4",
        planId: "2",
        subscriber: subscriber.toLowerCase(),
        amount: "1000000",
        code: "InvalidRequest",
        message: "the chain refused the renewal",
        reason,
      },
    ]);
    const app = providerApp([mountSubscriptionViews({ store, token, scope: { chainId: 31337, manager } })]);
    const text = await pageText(app, "/subscriptions");
    expect(text).toContain(`ERC20InsufficientBalance(${subscriber}, 5, 1000000)`);
    expect(text).toContain("the chain refused the renewal");
    expect(text).not.toContain(reason);
  });
});

/** A one-time payment to the provider, moved to `status` with the given columns. */
async function paymentTo(status: "settled" | "failed", set: Record<string, unknown>, memo?: string) {
  const row = await insertTestPayment(store, memo);
  const columns = { pay_to: provider.toLowerCase(), status, ...set };
  const names = Object.keys(columns);
  await store.query(
    `UPDATE payments SET ${names.map((n, i) => `${n} = $${i + 2}`).join(", ")} WHERE id = $1`,
    [row.id, ...Object.values(columns)],
  );
  return row;
}

describe("failed one-time payments", () => {
  it("are listed on the payments page with their code, decoded reason and time; settled ones stay apart", async () => {
    const revert = encodeErrorResult({
      abi: parseAbi(["error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)"]),
      errorName: "ERC20InsufficientBalance",
      args: [subscriber, 0n, 10_000n],
    });
    const failed = await paymentTo("failed", {
      failure_code: "InsufficientFunds",
      failure_message: `the chain refused the transfer (revert data ${revert})`,
      updated_at: new Date("2026-11-21T09:30:00Z"),
    });
    await paymentTo("settled", { settled_at: new Date("2026-11-21T10:00:00Z") });
    const text = await pageText(providerApp([]), "/payments");
    const section = text.slice(text.indexOf('id="failed-payments"'));
    expect(section).toContain("InsufficientFunds");
    expect(section).toContain(`ERC20InsufficientBalance(${subscriber}, 0, 10000)`);
    expect(section).toContain("2026-11-21 09:30");
    expect(section).toContain(getAddress(failed.payer));
    expect(section.match(/data-failed-payment/g)).toHaveLength(1);
  });
});

/** A memo whose claims name the route (`m`, `p`), as a gate seals one; the MAC is not checked here. */
function memoFor(method: string, path: string): string {
  const claims = { m: method, p: path, r: "AAAAAAAAAAAAAAAA" };
  return `${base64UrlEncode(utf8Encode(JSON.stringify(claims)))}.${"A".repeat(43)}`;
}

describe("revenue", () => {
  it("is broken down by the route paid for and by plan, plans named by their terms", async () => {
    const at = new Date("2026-11-21T11:00:00Z");
    await paymentTo("settled", { settled_at: at, amount: 20_000n }, memoFor("GET", "/v1/summarize"));
    await paymentTo("settled", { settled_at: at, amount: 30_000n }, memoFor("GET", "/v1/summarize"));
    await paymentTo("settled", { settled_at: at, amount: 10_000n }, memoFor("POST", "/v1/translate"));
    // Memos the facilitator took without reading their claims: not base64url, and not JSON.
    await paymentTo("settled", { settled_at: at, amount: 1n }, "not base64!.x");
    await paymentTo("settled", { settled_at: at, amount: 1n }, `${base64UrlEncode(utf8Encode("\u00ff{"))}.x`);
    const scope = { chainId: 31337, manager };
    await store.query(
      `INSERT INTO plans (chain_id, manager, plan_id, provider, token, amount, interval_seconds, included_units,
         overage_unit_price) VALUES ($1, $2, 2, $3, $3, 1000000, 2592000, 0, 0)`,
      [scope.chainId, manager.toLowerCase(), provider.toLowerCase()],
    );
    await store.query("INSERT INTO events (type, data, created_at) VALUES ('subscription.renewed', $1, $2)", [
      {
        provider: provider.toLowerCase(),
        planId: "2",
        subscriber: subscriber.toLowerCase(),
        amount: "1000000",
      },
      at,
    ]);
    const planNames = subscriptionDashboard(store, scope).planNames;
    const text = await pageText(providerApp([], planNames), "/");

    const byRoute = text.slice(text.indexOf('id="revenue-by-route"'));
    const routes = [
      ...byRoute.matchAll(
        /<tr data-route-revenue><td>(.*?)<\/td><td class="num">(.*?)<\/td><td class="num">(\d+)/g,
      ),
    ];
    // The x402 payment of the test above and the two unreadable memos share the unrecorded route.
    expect(routes.map((m) => [m[1], m[2], m[3]])).toEqual([
      ["<code>GET /v1/summarize</code>", "0.05 USDC", "2"],
      [
        '<span class="muted">not recorded (an x402 payment, or a memo without a route)</span>',
        "0.010002 USDC",
        "3",
      ],
      ["<code>POST /v1/translate</code>", "0.01 USDC", "1"],
    ]);
    const byPlan = text.slice(text.indexOf('id="revenue-by-plan"'));
    expect(byPlan).toMatch(
      /data-plan-revenue="2"><td>plan 2: 1 USDC \/ 30d<\/td><td class="num">1 USDC<\/td>/,
    );
    expect(text).toContain('"label":"plan 2: 1 USDC / 30d"');

    // The Subscriptions page names the plan the same way (here: a failed renewal of it).
    await store.query("INSERT INTO events (type, data) VALUES ('subscription.renewal_failed', $1)", [
      { provider: provider.toLowerCase(), subscriptionId: "9", planId: "2", amount: "1000000", reason: "0x" },
    ]);
    const subscriptions = await pageText(
      providerApp([mountSubscriptionViews({ store, token, scope })]),
      "/subscriptions",
    );
    expect(subscriptions).toMatch(/<td>9<\/td><td>plan 2: 1 USDC \/ 30d<\/td>/);
    expect(subscriptions).toContain("reverted without a reason (0x)");
  });
});

describe("webhook endpoints' health", () => {
  it("flags an endpoint whose latest attempts all failed, with its success rate and last failure", async () => {
    const repository = createWebhookRepository({
      store,
      randomBytes: (n) => new Uint8Array(randomBytes(n)),
      secrets: createWebhookSecretBox([new Uint8Array(randomBytes(32))]),
    });
    const now = new Date(clock.now());
    const refusing = await repository.create(provider, { url: "https://refusing.example/hook" }, now);
    const healthy = await repository.create(provider, { url: "https://healthy.example/hook" }, now);
    const quiet = await repository.create(provider, { url: "https://quiet.example/hook" }, now);
    const [event] = await store.query<{ id: string }>(
      "INSERT INTO events (type, data) VALUES ('payment.settled', '{}') RETURNING id",
    );
    // The refusing endpoint answered once, then refused four connections; the healthy one failed once
    // among successes. Attempts are minutes apart, the latest last.
    const attempts: [string, number | null, string | null][] = [
      [refusing.id, 200, null],
      [refusing.id, null, "connect ECONNREFUSED 10.0.0.1:443"],
      [refusing.id, null, "connect ECONNREFUSED 10.0.0.1:443"],
      [refusing.id, null, "connect ECONNREFUSED 10.0.0.1:443"],
      [refusing.id, null, "connect ECONNREFUSED 10.0.0.2:443"],
      [healthy.id, 500, "upstream down"],
      [healthy.id, 204, null],
      [healthy.id, 200, null],
      [healthy.id, 200, null],
    ];
    const deliveries = new Map<string, string>();
    for (const endpoint of [refusing.id, healthy.id]) {
      const [row] = await store.query<{ id: string }>(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, next_attempt_at) VALUES ($1, $2, $3) RETURNING id`,
        [endpoint, event?.id, now],
      );
      deliveries.set(endpoint, String(row?.id));
    }
    for (const [i, [endpoint, status, error]] of attempts.entries()) {
      await store.query(
        "INSERT INTO webhook_attempts (delivery_id, attempted_at, status_code, error) VALUES ($1, $2, $3, $4)",
        [deliveries.get(endpoint), new Date(clock.now() - (60 - i) * 60_000), status, error],
      );
    }
    const text = await pageText(providerApp([mountWebhookViews({ repository, clock, store })]), "/webhooks");
    const panel = (id: string) => {
      const start = text.indexOf(`data-endpoint="${id}"`);
      return text.slice(start, text.indexOf("</section>", start));
    };
    expect(panel(refusing.id)).toContain('data-health="failing"');
    expect(panel(refusing.id)).toContain("20% of the last 5 attempts succeeded");
    expect(panel(refusing.id)).toMatch(
      /last failure 2026-11-22 11:04 UTC: <span data-last-failure>connect ECONNREFUSED 10\.0\.0\.2:443</,
    );
    expect(panel(healthy.id)).toContain('data-health="ok"');
    expect(panel(healthy.id)).toContain("75% of the last 4 attempts succeeded");
    expect(panel(healthy.id)).toContain("HTTP 500: upstream down");
    expect(panel(quiet.id)).toContain('data-health="unknown"');
  });
});

describe("a custom range", () => {
  it("is asked for by a plain form on the revenue page, whose from/to dates the page reads", async () => {
    const app = providerApp([]);
    const home = await pageText(app, "/");
    expect(home).toMatch(/<form method="get" action="\/dashboard\/provider" class="range-form"/);
    // What the form sends: UTC days and the bucket, no script needed.
    const custom = await pageText(app, "/?from=2026-11-20&to=2026-11-23&bucket=day");
    expect(custom).toContain('value="2026-11-20"');
    expect(custom).toContain('value="2026-11-23"');
    expect(custom).toMatch(/<option value="day" selected>/);
  });
});
