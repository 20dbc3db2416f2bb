/**
 * The provider's views: revenue over time (by scheme and by plan, per hour or day, from the same
 * analytics reader as `GET /analytics/volume`), payments and payers, subscriptions by state with their
 * renewal dates, metered usage against caps and failed renewals; webhooks and plans are in their own
 * files. Every read is scoped to the signed-in provider.
 */
import type { Hono } from "hono";
import type { Address } from "viem";
import { getAddress } from "viem";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import type { IndexScope } from "../../schemes/subscription/facilitator/subscriptionRecords.ts";
import type { Store } from "../../store/store.ts";
import { type AnalyticsBucket, AnalyticsVolumeQuerySchema } from "../analytics/analyticsApi.ts";
import { bucketStart, queryAnalyticsVolume } from "../analytics/queryAnalytics.ts";
import { routeDoc } from "../routeDocs.ts";
import type { DashboardEnv, DashboardSection } from "./dashboardApp.ts";
import { money, page, short, table, when } from "./dashboardLayout.ts";
import { html, jsonForScript, type SafeHtml } from "./html.ts";
import { recentEventsOf, recentPayments, subscriptionsOfProvider, topPayers } from "./providerRecords.ts";

/** The token amounts are shown in (the facilitator's first token). */
export type DisplayToken = { decimals: number; symbol: string };

export type ProviderViewsDeps = {
  store: Store;
  clock: { now(): number };
  token: DisplayToken;
  /** The SubscriptionManager's index scope; absent on a facilitator without subscriptions. */
  scope: IndexScope | undefined;
  /** Largest number of buckets one chart asks for (the analytics API's limit, default 2 000). */
  maxBuckets?: number | undefined;
};

export const PROVIDER_NAV = [
  { href: "/dashboard/provider", label: "Revenue" },
  { href: "/dashboard/provider/payments", label: "Payments" },
  { href: "/dashboard/provider/subscriptions", label: "Subscriptions" },
  { href: "/dashboard/provider/webhooks", label: "Webhooks" },
  { href: "/dashboard/provider/plans", label: "Plans" },
] as const;

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** The frame of a provider page. */
export function providerFrame(
  session: { provider?: Address; csrfToken: string },
  title: string,
  current: string,
  notice?: { text: string; error?: boolean },
) {
  return {
    title,
    current,
    nav: PROVIDER_NAV,
    who: `Provider ${session.provider ?? ""}`,
    csrfToken: session.csrfToken,
    notice,
  };
}

/** The provider's signed-in address (the section only admits provider sessions). */
export function providerOf(session: DashboardEnv["Variables"]["session"]): Address {
  if (session.kind !== "provider") throw new TollgateError("Forbidden", "sign in as a provider");
  return session.provider;
}

/** The revenue, payments and subscriptions views, plus the sections given (webhooks, plans). */
export function providerSection(
  deps: ProviderViewsDeps,
  more: readonly ((app: Hono<DashboardEnv>) => void)[],
): DashboardSection {
  const maxBuckets = deps.maxBuckets ?? 2_000;
  const docs = {
    home: routeDoc({
      summary: "Dashboard: the provider's volume chart, recent events and top payers",
      query: AnalyticsVolumeQuerySchema,
      response: { media: "text/html" },
      errors: [400, 403],
    }),
    payments: routeDoc({
      summary: "Dashboard: the provider's recent payments",
      response: { media: "text/html" },
      errors: [403],
    }),
    subscriptions: routeDoc({
      summary: "Dashboard: the subscriptions of the provider's plans",
      response: { media: "text/html" },
      errors: [403],
    }),
  };
  return {
    kind: "provider",
    prefix: "provider",
    nav: PROVIDER_NAV,
    mount(app) {
      app.get("/", docs.home, async (c) => {
        const session = c.get("session");
        const provider = providerOf(session);
        const query = parseWire(AnalyticsVolumeQuerySchema, c.req.query(), { what: "query" });
        // The analytics API's defaults: up to now, 24 hours of hours or 30 days of days.
        const step = query.bucket === "hour" ? HOUR_MS : DAY_MS;
        const to = query.to ?? new Date(deps.clock.now());
        const from = query.from ?? new Date(to.getTime() - (query.bucket === "hour" ? 24 : 30) * step);
        if (!(from.getTime() < to.getTime()))
          throw new TollgateError("InvalidRequest", "from must be before to");
        const count = Math.ceil((to.getTime() - bucketStart(from, query.bucket).getTime()) / step);
        if (count > maxBuckets) {
          throw new TollgateError(
            "InvalidRequest",
            `the range holds ${count} ${query.bucket}s; ask for at most ${maxBuckets}`,
          );
        }
        const buckets = await queryAnalyticsVolume(
          deps.store,
          { provider, from, to, token: query.token },
          query.bucket,
        );
        return c.html(
          page(
            providerFrame(session, "Revenue", "/dashboard/provider"),
            revenueView(deps.token, query.bucket, from, to, buckets),
          ),
        );
      });

      app.get("/payments", docs.payments, async (c) => {
        const session = c.get("session");
        const provider = providerOf(session);
        const [payments, payers] = await Promise.all([
          recentPayments(deps.store, provider),
          topPayers(deps.store, provider),
        ]);
        const t = deps.token;
        const body = html`<div class="grid2">
<section class="panel"><h2>Recent one-time payments</h2>${table(
          ["Settled", "Payer", { label: "Amount", num: true }, "Transaction"],
          payments.map(
            (p) =>
              html`<tr><td>${when(p.settled_at)}</td><td>${short(getAddress(p.payer))}</td><td class="num">${money(p.amount, t)}</td><td>${p.tx_hash === null ? "-" : short(p.tx_hash)}</td></tr>`,
          ),
          "No settled payments yet.",
        )}</section>
<section class="panel"><h2>Payers</h2>${table(
          ["Payer", { label: "Payments", num: true }, { label: "Volume", num: true }, "Last"],
          payers.map(
            (p) =>
              html`<tr><td>${short(getAddress(p.payer))}</td><td class="num">${p.payments}</td><td class="num">${money(p.volume, t)}</td><td>${when(p.last_at)}</td></tr>`,
          ),
          "No payers yet.",
        )}</section></div>`;
        return c.html(
          page(providerFrame(session, "Payments and payers", "/dashboard/provider/payments"), body),
        );
      });

      app.get("/subscriptions", docs.subscriptions, async (c) => {
        const session = c.get("session");
        const provider = providerOf(session);
        const frame = providerFrame(session, "Subscriptions", "/dashboard/provider/subscriptions");
        if (deps.scope === undefined) {
          return c.html(
            page(frame, html`<p class="muted">This facilitator runs no SubscriptionManager.</p>`),
          );
        }
        const [subs, failed] = await Promise.all([
          subscriptionsOfProvider(deps.store, deps.scope, provider),
          recentEventsOf(deps.store, provider, ["subscription.renewal_failed"]),
        ]);
        return c.html(page(frame, subscriptionsView(deps.token, subs, failed)));
      });

      for (const mountMore of more) mountMore(app);
    },
  };
}

type Buckets = Awaited<ReturnType<typeof queryAnalyticsVolume>>;

function revenueView(
  token: DisplayToken,
  bucket: AnalyticsBucket,
  from: Date,
  to: Date,
  buckets: Buckets,
): SafeHtml {
  const scale = 10 ** token.decimals;
  const x = buckets.map((b) => Math.floor(b.start.getTime() / 1000));
  const asNumber = (v: string) => Number(BigInt(v)) / scale;
  const schemes = ["one-time", "subscription", "metered"] as const;
  const byScheme = {
    x,
    unit: token.symbol,
    decimals: token.decimals,
    series: schemes.map((s) => ({ label: s, values: buckets.map((b) => asNumber(b.schemes[s].volume)) })),
  };
  const planIds = [...new Set(buckets.flatMap((b) => b.plans.map((p) => p.planId)))].sort(
    (a, b) => Number(a) - Number(b),
  );
  const byPlan = {
    x,
    unit: token.symbol,
    decimals: token.decimals,
    series: planIds.map((id) => ({
      label: `plan ${id}`,
      values: buckets.map((b) => asNumber(b.plans.find((p) => p.planId === id)?.volume ?? "0")),
    })),
  };
  const total = buckets.reduce((s, b) => s + BigInt(b.volume), 0n);
  const charges = buckets.reduce((s, b) => s + b.count, 0);
  const range = (b: AnalyticsBucket) =>
    html`<a class="button${b === bucket ? " primary" : ""}" href="/dashboard/provider?bucket=${b}">${b === "hour" ? "Last 24 hours, by hour" : "Last 30 days, by day"}</a>`;
  const rows = buckets
    .filter((b) => b.count > 0)
    .reverse()
    .map(
      (b) =>
        html`<tr><td>${when(b.start)}</td><td class="num">${money(BigInt(b.volume), token)}</td><td class="num">${b.count}</td><td class="num">${b.uniquePayers}</td><td class="num">${money(BigInt(b.schemes["one-time"].volume), token)}</td><td class="num">${money(BigInt(b.schemes.subscription.volume), token)}</td><td class="num">${money(BigInt(b.schemes.metered.volume), token)}</td></tr>`,
    );
  return html`<div class="controls">${range("hour")}${range("day")}<span class="muted">${when(from)} – ${when(to)}</span></div>
<div class="cards">
<div class="card"><div class="label">Volume</div><div class="value" id="total-volume">${money(total, token)}</div></div>
<div class="card"><div class="label">Charges</div><div class="value">${charges}</div></div>
</div>
<section class="panel"><h2>Volume by scheme</h2><div class="chart" data-chart="chart-scheme"></div>
<script type="application/json" id="chart-scheme">${jsonForScript(byScheme)}</script></section>
<section class="panel"><h2>Volume by plan</h2>${
    planIds.length === 0
      ? html`<p class="muted">No subscription or metered charges in this range.</p>`
      : html`<div class="chart" data-chart="chart-plan"></div>
<script type="application/json" id="chart-plan">${jsonForScript(byPlan)}</script>`
  }</section>
<section class="panel"><h2>By ${bucket}</h2>${table(
    [
      "Start",
      { label: "Volume", num: true },
      { label: "Charges", num: true },
      { label: "Payers", num: true },
      { label: "One-time", num: true },
      { label: "Subscription", num: true },
      { label: "Metered", num: true },
    ],
    rows,
    "No charges in this range.",
  )}</section>`;
}

type Subs = Awaited<ReturnType<typeof subscriptionsOfProvider>>;
type Events = Awaited<ReturnType<typeof recentEventsOf>>;

function subscriptionsView(token: DisplayToken, subs: Subs, failed: Events): SafeHtml {
  const states = ["Active", "Paused", "PastDue", "Cancelled"] as const;
  const label = { Active: "active", Paused: "paused", PastDue: "past due", Cancelled: "cancelled" } as const;
  const cards = states.map(
    (s) =>
      html`<div class="card"><div class="label">${label[s]}</div><div class="value" data-state="${s}">${subs.filter((x) => x.status === s).length}</div></div>`,
  );
  const rows = subs.map(
    (s) =>
      html`<tr><td>${s.subscription_id}</td><td>${s.plan_id}</td><td>${short(getAddress(s.subscriber))}</td><td><span class="pill ${s.status}">${label[s.status]}</span></td><td>${when(s.created_at_chain)}</td><td>${s.status === "Active" || s.status === "PastDue" ? when(s.current_period_end) : "-"}</td></tr>`,
  );
  const metered = subs
    .filter((s) => s.max_overage > 0n && s.status !== "Cancelled")
    .map((s) => {
      const pct = Number((s.overage_used * 1000n) / s.max_overage) / 10;
      return html`<tr><td>${s.subscription_id}</td><td>${s.plan_id}</td><td>${short(getAddress(s.subscriber))}</td><td class="num">${money(s.overage_used, token)}</td><td class="num">${money(s.max_overage, token)}</td><td><meter min="0" max="100" low="70" high="90" optimum="0" value="${pct}">${pct}%</meter> ${pct}%</td></tr>`;
    });
  const failures = failed.map((e) => {
    const d = e.data;
    const text = (k: string) => (typeof d[k] === "string" ? (d[k] as string) : "-");
    const amount =
      typeof d.amount === "string" && /^[0-9]{1,78}$/.test(d.amount) ? money(BigInt(d.amount), token) : "-";
    return html`<tr><td>${when(e.created_at)}</td><td>${text("subscriptionId")}</td><td>${text("planId")}</td><td>${text("subscriber") === "-" ? "-" : short(text("subscriber"))}</td><td class="num">${amount}</td><td>${text("reason")}</td></tr>`;
  });
  return html`<div class="cards">${cards}</div>
<section class="panel"><h2>Subscriptions and renewal dates</h2>${table(
    ["Id", "Plan", "Subscriber", "State", "Since", "Next renewal"],
    rows,
    "No subscriptions yet.",
  )}</section>
<section class="panel"><h2>Metered usage against caps</h2><p class="muted">Overage charged this period against the subscriber's cap (the cycle's included units are counted by the gate).</p>${table(
    [
      "Subscription",
      "Plan",
      "Subscriber",
      { label: "Overage used", num: true },
      { label: "Cap", num: true },
      "Used",
    ],
    metered,
    "No metered subscriptions with a cap.",
  )}</section>
<section class="panel"><h2>Failed renewals</h2>${table(
    ["When", "Subscription", "Plan", "Subscriber", { label: "Amount", num: true }, "Reason"],
    failures,
    "No failed renewals.",
  )}</section>`;
}
