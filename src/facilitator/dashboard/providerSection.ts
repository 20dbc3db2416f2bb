/**
 * The provider's views: revenue over time (by scheme and by plan, per hour or day, from the same
 * analytics reader as `GET /analytics/volume`), payments and payers; the other pages of the section
 * are views given to it (webhooks, and what scheme parts contribute: the subscription part's
 * subscriptions and plans). Every read is scoped to the signed-in provider.
 */
import type { Hono } from "hono";
import type { Address } from "viem";
import { getAddress } from "viem";
import {
  type DisplayToken,
  money,
  type NavEntry,
  type PageFrame,
  page,
  rangeForm,
  short,
  table,
  when,
} from "../../http/dashboardLayout.ts";
import { html, jsonForScript, type SafeHtml } from "../../http/html.ts";
import { routeDoc } from "../../http/routeDocs.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import type { Store } from "../../store/store.ts";
import {
  type AnalyticsBucket,
  type AnalyticsVolumeQuery,
  AnalyticsVolumeQuerySchema,
} from "../analytics/analyticsApi.ts";
import { bucketStart, queryAnalyticsVolume } from "../analytics/queryAnalytics.ts";
import type { DashboardEnv, DashboardSection } from "./dashboardApp.ts";
import {
  type FailedPayment,
  failedPayments,
  type ProviderPayer,
  type ProviderPayment,
  type RouteRevenue,
  recentPayments,
  revenueByRoute,
  topPayers,
} from "./providerRecords.ts";
import { describeFailureMessage } from "./revertReason.ts";

/**
 * The provider's plans by id (decimal text), each named for a person: by the name the provider gave
 * it where the scheme keeps one, else by its terms priced in `token` (`1 USDC / 30d`).
 */
export type PlanNames = (provider: Address, token: DisplayToken) => Promise<ReadonlyMap<string, string>>;

export type ProviderViewsDeps = {
  store: Store;
  clock: { now(): number };
  token: DisplayToken;
  /** Largest number of buckets one chart asks for (the analytics API's limit, default 2 000). */
  maxBuckets?: number | undefined;
  /** Names for the provider's plans (a scheme part's); without it a plan is shown by its id. */
  planNames?: PlanNames | undefined;
};

/** A navigation entry of the provider's section, placed among the others by `order`, lowest first. */
export type ProviderNavEntry = NavEntry & { order: number };

/** The frame of a provider page: the section's navigation with `current` marked, and who is signed in. */
export type ProviderFrame = (
  session: { provider?: Address; csrfToken: string },
  title: string,
  current: string,
  notice?: { text: string; error?: boolean },
) => PageFrame;

/**
 * Pages mounted in the provider's section beside its own (revenue, payments): the webhooks views, and
 * the views a scheme's facilitator part contributes (SchemeDashboard, schemeDashboard.ts).
 */
export type ProviderView = {
  /** Its entries in the section's navigation (revenue is 10, payments 20, webhooks 40). */
  nav: readonly ProviderNavEntry[];
  /** Mounts its routes under `/dashboard/provider`; `frame` frames its pages. */
  mount(app: Hono<DashboardEnv>, frame: ProviderFrame): void;
};

const OWN_NAV: readonly ProviderNavEntry[] = [
  { href: "/dashboard/provider", label: "Revenue", order: 10 },
  { href: "/dashboard/provider/payments", label: "Payments", order: 20 },
];

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** The frame of the section whose navigation is `nav`. */
function providerFrameOf(nav: readonly NavEntry[]): ProviderFrame {
  return (session, title, current, notice) => ({
    title,
    current,
    nav,
    who: `Provider ${session.provider ?? ""}`,
    csrfToken: session.csrfToken,
    notice,
  });
}

/** The provider's signed-in address (the section only admits provider sessions). */
export function providerOf(session: DashboardEnv["Variables"]["session"]): Address {
  if (session.kind !== "provider") throw new TollgateError("Forbidden", "sign in as a provider");
  return session.provider;
}

/**
 * The revenue and payments views, plus the views given (webhooks, a scheme part's), mounted in the
 * order of their first navigation entry; the navigation lists every entry by `order`.
 */
export function providerSection(deps: ProviderViewsDeps, views: readonly ProviderView[]): DashboardSection {
  const byOrder = (a: { order: number }, b: { order: number }) => a.order - b.order;
  const sorted = [...views].sort((a, b) => byOrder(a.nav[0] ?? { order: 0 }, b.nav[0] ?? { order: 0 }));
  const nav = [...OWN_NAV, ...views.flatMap((view) => view.nav)]
    .sort(byOrder)
    .map(({ href, label }) => ({ href, label }));
  const providerFrame = providerFrameOf(nav);
  const maxBuckets = deps.maxBuckets ?? 2_000;
  const docs = {
    home: routeDoc({
      summary: "Dashboard: the provider's volume charts, revenue by plan and by route",
      query: AnalyticsVolumeQuerySchema,
      response: { media: "text/html" },
      errors: [400, 403],
    }),
    payments: routeDoc({
      summary: "Dashboard: the provider's recent payments, payers and failed payments",
      response: { media: "text/html" },
      errors: [403],
    }),
  };
  return {
    kind: "provider",
    prefix: "provider",
    nav,
    mount(app) {
      app.get("/", docs.home, async (c) => {
        const session = c.get("session");
        const provider = providerOf(session);
        const query = parseWire(AnalyticsVolumeQuerySchema, c.req.query(), { what: "query" });
        const { from, to } = chartRange(query, deps.clock.now(), maxBuckets);
        const [buckets, routes, planNames] = await Promise.all([
          queryAnalyticsVolume(deps.store, { provider, from, to, token: query.token }, query.bucket),
          revenueByRoute(deps.store, provider, { from, to, token: query.token }),
          deps.planNames?.(provider, deps.token) ?? new Map<string, string>(),
        ]);
        const revenue = { token: deps.token, bucket: query.bucket, from, to, buckets, planNames };
        return c.html(
          page(
            providerFrame(session, "Revenue", "/dashboard/provider"),
            html`${revenueView(revenue)}${routeRevenueView(deps.token, routes)}`,
          ),
        );
      });

      app.get("/payments", docs.payments, async (c) => {
        const session = c.get("session");
        const provider = providerOf(session);
        const [payments, payers, failed] = await Promise.all([
          recentPayments(deps.store, provider),
          topPayers(deps.store, provider),
          failedPayments(deps.store, provider),
        ]);
        return c.html(
          page(
            providerFrame(session, "Payments and payers", "/dashboard/provider/payments"),
            html`${paymentsView(deps.token, payments, payers)}${failedPaymentsView(deps.token, failed)}`,
          ),
        );
      });

      for (const view of sorted) view.mount(app, providerFrame);
    },
  };
}

/**
 * The chart's range with the analytics API's defaults: up to now, 24 hours of hours or 30 days of
 * days; at most `maxBuckets` buckets.
 */
function chartRange(
  query: Pick<AnalyticsVolumeQuery, "bucket" | "from" | "to">,
  now: number,
  maxBuckets: number,
): { from: Date; to: Date } {
  const step = query.bucket === "hour" ? HOUR_MS : DAY_MS;
  const to = query.to ?? new Date(now);
  const from = query.from ?? new Date(to.getTime() - (query.bucket === "hour" ? 24 : 30) * step);
  if (!(from.getTime() < to.getTime())) throw new TollgateError("InvalidRequest", "from must be before to");
  const count = Math.ceil((to.getTime() - bucketStart(from, query.bucket).getTime()) / step);
  if (count > maxBuckets) {
    throw new TollgateError(
      "InvalidRequest",
      `the range holds ${count} ${query.bucket}s; ask for at most ${maxBuckets}`,
    );
  }
  return { from, to };
}

function paymentsView(t: DisplayToken, payments: ProviderPayment[], payers: ProviderPayer[]): SafeHtml {
  return html`<div class="grid2">
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
}

/** Payments the chain refused, with the refusal's code and message (any revert data in it decoded). */
function failedPaymentsView(t: DisplayToken, failed: FailedPayment[]): SafeHtml {
  return html`<section class="panel" id="failed-payments"><h2>Failed one-time payments</h2>${table(
    ["Failed", "Payer", { label: "Amount", num: true }, "Reason", "Transaction"],
    failed.map(
      (p) =>
        html`<tr data-failed-payment><td>${when(p.failed_at)}</td><td>${short(getAddress(p.payer))}</td><td class="num">${money(p.amount, t)}</td><td><code>${p.failure_code ?? "-"}</code>${p.failure_message === null ? "" : html` ${describeFailureMessage(p.failure_message)}`}</td><td>${p.tx_hash === null ? "-" : short(p.tx_hash)}</td></tr>`,
    ),
    "No failed payments.",
  )}</section>`;
}

type Buckets = Awaited<ReturnType<typeof queryAnalyticsVolume>>;

type Revenue = {
  token: DisplayToken;
  bucket: AnalyticsBucket;
  from: Date;
  to: Date;
  buckets: Buckets;
  /** Plan names by id; a plan without one is shown as `plan <id>`. */
  planNames: ReadonlyMap<string, string>;
};

function planLabel(names: ReadonlyMap<string, string>, planId: string): string {
  return names.get(planId) ?? `plan ${planId}`;
}

function revenueView(r: Revenue): SafeHtml {
  const { token, bucket, from, to, buckets } = r;
  const total = buckets.reduce((s, b) => s + BigInt(b.volume), 0n);
  const charges = buckets.reduce((s, b) => s + b.count, 0);
  const range = (b: AnalyticsBucket) =>
    html`<a class="button${b === bucket ? " primary" : ""}" href="/dashboard/provider?bucket=${b}">${b === "hour" ? "Last 24 hours, by hour" : "Last 30 days, by day"}</a>`;
  return html`<div class="controls">${range("hour")}${range("day")}<span class="muted">${when(from)} – ${when(to)}</span></div>
${rangeForm("/dashboard/provider", { bucket, from, to })}
<div class="cards">
<div class="card"><div class="label">Volume</div><div class="value" id="total-volume">${money(total, token)}</div></div>
<div class="card"><div class="label">Charges</div><div class="value">${charges}</div></div>
</div>
${revenueCharts(r)}${planRevenueView(r)}${bucketTable(token, bucket, buckets)}`;
}

/** The volume charts: by scheme, and by plan under the plans' names. */
function revenueCharts(r: Revenue): SafeHtml {
  const { token, buckets } = r;
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
  const planIds = planIdsOf(buckets);
  const byPlan = {
    x,
    unit: token.symbol,
    decimals: token.decimals,
    series: planIds.map((id) => ({
      label: planLabel(r.planNames, id),
      values: buckets.map((b) => asNumber(b.plans.find((p) => p.planId === id)?.volume ?? "0")),
    })),
  };
  return html`<section class="panel"><h2>Volume by scheme</h2><div class="chart" data-chart="chart-scheme"></div>
<script type="application/json" id="chart-scheme">${jsonForScript(byScheme)}</script></section>
<section class="panel"><h2>Volume by plan</h2>${
    planIds.length === 0
      ? html`<p class="muted">No subscription or metered charges in this range.</p>`
      : html`<div class="chart" data-chart="chart-plan"></div>
<script type="application/json" id="chart-plan">${jsonForScript(byPlan)}</script>`
  }</section>`;
}

function planIdsOf(buckets: Buckets): string[] {
  return [...new Set(buckets.flatMap((b) => b.plans.map((p) => p.planId)))].sort(
    (a, b) => Number(a) - Number(b),
  );
}

/** The range's subscription and metered revenue per plan, largest first, under the plans' names. */
function planRevenueView(r: Revenue): SafeHtml {
  const totals = new Map<string, { volume: bigint; count: number }>();
  for (const b of r.buckets) {
    for (const p of b.plans) {
      const t = totals.get(p.planId) ?? { volume: 0n, count: 0 };
      totals.set(p.planId, { volume: t.volume + BigInt(p.volume), count: t.count + p.count });
    }
  }
  const rows = [...totals]
    .sort(([, a], [, b]) => (a.volume === b.volume ? 0 : a.volume > b.volume ? -1 : 1))
    .map(
      ([id, t]) =>
        html`<tr data-plan-revenue="${id}"><td>${planLabel(r.planNames, id)}</td><td class="num">${money(t.volume, r.token)}</td><td class="num">${t.count}</td></tr>`,
    );
  return html`<section class="panel" id="revenue-by-plan"><h2>Revenue by plan</h2>${table(
    ["Plan", { label: "Volume", num: true }, { label: "Charges", num: true }],
    rows,
    "No subscription or metered charges in this range.",
  )}</section>`;
}

/** The range's settled one-time revenue per route paid for (method and path), largest first. */
function routeRevenueView(t: DisplayToken, routes: RouteRevenue[]): SafeHtml {
  const rows = routes.map(
    (r) =>
      html`<tr data-route-revenue><td>${r.path === null ? html`<span class="muted">not recorded (an x402 payment, or a memo without a route)</span>` : html`<code>${r.method ?? ""} ${r.path}</code>`}</td><td class="num">${money(r.volume, t)}</td><td class="num">${r.payments}</td></tr>`,
  );
  return html`<section class="panel" id="revenue-by-route"><h2>One-time revenue by route</h2>${table(
    ["Route", { label: "Volume", num: true }, { label: "Payments", num: true }],
    rows,
    "No one-time payments in this range.",
  )}</section>`;
}

function bucketTable(token: DisplayToken, bucket: AnalyticsBucket, buckets: Buckets): SafeHtml {
  const rows = buckets
    .filter((b) => b.count > 0)
    .reverse()
    .map(
      (b) =>
        html`<tr><td>${when(b.start)}</td><td class="num">${money(BigInt(b.volume), token)}</td><td class="num">${b.count}</td><td class="num">${b.uniquePayers}</td><td class="num">${money(BigInt(b.schemes["one-time"].volume), token)}</td><td class="num">${money(BigInt(b.schemes.subscription.volume), token)}</td><td class="num">${money(BigInt(b.schemes.metered.volume), token)}</td></tr>`,
    );
  return html`<section class="panel"><h2>By ${bucket}</h2>${table(
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
