/**
 * The agent operator's views, from the agents' store: every agent with a budget; per agent its
 * budget and limits (the ledger's own report), spend over time by tool, seller and mode, what its
 * schemes show (the subscription scheme: the subscriptions it holds with their next renewal), the
 * policy's reasons, the calls refused or failed with their codes, and the latest run's spend report
 * (rebuilt from the run's recorded events with the collector the run printed). The views name no
 * scheme: they ask the agent parts they are given (`AgentSchemePart.dashboard`; the agent's built-ins
 * unless told).
 */
import { z } from "zod";
import type { DashboardAgents, DashboardSection } from "../../facilitator/dashboard/schemeDashboard.ts";
import {
  type DisplayToken,
  money,
  page,
  short,
  shortAddress,
  table,
  when,
} from "../../http/dashboardLayout.ts";
import { html, jsonForScript, type SafeHtml } from "../../http/html.ts";
import { routeDoc } from "../../http/routeDocs.ts";
import type { Clock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Store } from "../../store/store.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { defaultAgentSchemes } from "../agentSchemes.ts";
import { AgentIdSchema } from "../budget/budgetLimits.ts";
import type { BudgetReport } from "../budget/budgetReport.ts";
import { createBudgetLedger } from "../budget/createBudgetLedger.ts";
import type { SpendReport } from "../spendReport.ts";
import type { AgentDashboardHost, AgentDashboardPart, AgentNextRenewal } from "./agentDashboardPart.ts";
import { listAgents } from "./agentRecords.ts";
import { outcomeOf, refusalsPanel } from "./agentRefusals.ts";
import { type AgentRun, latestRunReport, type RunSpendRow, spendEventsOf } from "./runSpendRecords.ts";

/**
 * Runs `work` with the agents' store: the store itself where it stays open (the facilitator's), or
 * opened for the one page view (`tollgate dashboard` over PGlite, whose directory opens in one process
 * at a time: holding it would stall `tollgate run`).
 */
export type AgentStoreAccess = <T>(work: (store: Store) => Promise<T>) => Promise<T>;

export type AgentViewsDeps = {
  store: AgentStoreAccess;
  clock: Clock;
  token: DisplayToken;
  /** When a subscription renews next (unix seconds), from the facilitator's index or the chain. */
  nextRenewal?: AgentNextRenewal | undefined;
  /** The schemes whose agent parts add to an agent's page; the agent's built-ins when absent. */
  schemes?: AgentSchemes | undefined;
};

const AGENT_NAV = [{ href: "/dashboard/agents", label: "Agents" }] as const;
const BucketSchema = z.enum(["hour", "day"]).default("hour").catch("hour");
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/**
 * The agent views on a facilitator's dashboard, over the agents' `store` and signed in with `token`;
 * the facilitator gives the clock, the token amounts are shown in, and its index's renewal dates.
 *
 * @example
 * createFacilitator({ …, dashboard: { agents: agentDashboard({ store, token }) } });
 */
export function agentDashboard(options: {
  store: Store;
  token: string;
  /** The schemes whose agent parts add to an agent's page; the agent's built-ins when absent. */
  schemes?: AgentSchemes | undefined;
}): DashboardAgents {
  const { store, schemes } = options;
  return {
    token: options.token,
    section: (host) =>
      agentSection({
        store: (work) => work(store),
        clock: host.clock,
        token: host.token,
        nextRenewal: host.nextRenewal,
        schemes,
      }),
  };
}

const docs = {
  agents: routeDoc({
    summary: "Dashboard: the agents, their budgets and latest runs (the agent operator)",
    response: { media: "text/html" },
    errors: [403],
  }),
  agent: routeDoc({
    summary: "Dashboard: one agent's runs and spending (the agent operator)",
    response: { media: "text/html" },
    errors: [400, 403, 404],
  }),
};

const frame = (csrfToken: string, title: string) => ({
  title,
  current: "/dashboard/agents",
  nav: AGENT_NAV,
  who: "Agent operator",
  csrfToken,
});

/** The agent views, under `/dashboard/agents`. */
export function agentSection(deps: AgentViewsDeps): DashboardSection {
  return {
    kind: "agent",
    prefix: "agents",
    nav: AGENT_NAV,
    mount(app) {
      app.get("/", docs.agents, async (c) =>
        c.html(page(frame(c.get("session").csrfToken, "Agents"), await agentsBody(deps))),
      );

      app.get("/:agent", docs.agent, async (c) => {
        const parsed = AgentIdSchema.safeParse(c.req.param("agent"));
        if (!parsed.success) throw new TollgateError("NotFound", "no agent with that name");
        const agent = parsed.data;
        const bucket = BucketSchema.parse(c.req.query("bucket"));
        const now = deps.clock.now();
        const since = new Date(now - (bucket === "hour" ? 24 * HOUR_MS : 30 * DAY_MS));
        const view = await loadAgentView(deps, agent, since);
        const body = agentBody(view, { bucket, since, to: new Date(now) }, deps.token);
        return c.html(page(frame(c.get("session").csrfToken, `Agent ${agent}`), body));
      });
    },
  };
}

/** Every agent with a budget, with its totals. */
async function agentsBody(deps: AgentViewsDeps): Promise<SafeHtml> {
  const reports = await deps.store(async (store) => {
    const ledger = createBudgetLedger({ store, clock: deps.clock });
    return Promise.all((await listAgents(store)).map((a) => ledger.report(a)));
  });
  const t = deps.token;
  const rows = reports.map(
    (r) =>
      html`<tr><td><a href="/dashboard/agents/${encodeURIComponent(r.agent)}">${r.agent}</a></td><td class="num">${money(r.spent.total, t)}</td><td class="num">${money(r.reserved.total, t)}</td><td class="num">${limit(r.limits.total, t)}</td><td class="num">${r.remaining.total === undefined ? "no limit" : money(r.remaining.total, t)}</td><td class="num">${r.subscriptions.active.length}</td></tr>`,
  );
  return html`<section class="panel">${table(
    [
      "Agent",
      { label: "Spent", num: true },
      { label: "Reserved", num: true },
      { label: "Total limit", num: true },
      { label: "Remaining", num: true },
      { label: "Subscriptions", num: true },
    ],
    rows,
    "No agent has a budget yet (tollgate budget set <agent> --total 10).",
  )}</section>`;
}

type AgentView = Awaited<ReturnType<typeof loadAgentView>>;

/** One agent's budget report, spend events since `since`, latest run, and its schemes' views. */
async function loadAgentView(deps: AgentViewsDeps, agent: string, since: Date) {
  const host: AgentDashboardHost = { clock: deps.clock, token: deps.token, nextRenewal: deps.nextRenewal };
  const parts = dashboardParts(deps.schemes ?? defaultAgentSchemes);
  const { report, events, latest, loads } = await deps.store(async (store) => {
    if (!(await listAgents(store)).includes(agent)) {
      throw new TollgateError("NotFound", "no agent with that name");
    }
    const [report, events, latest, loads] = await Promise.all([
      createBudgetLedger({ store, clock: deps.clock }).report(agent),
      spendEventsOf(store, agent, since),
      latestRunReport(store, agent),
      Promise.all(parts.map((part) => part.load(store, agent, host))),
    ]);
    return { report, events, latest, loads };
  });
  // Reads past the store (renewal dates) run after the page released it.
  const schemeViews = await Promise.all(loads.map((load) => load.render()));
  return { report, events, latest, schemeViews };
}

/** The dashboard parts of `schemes`' agent parts, in their order. */
function dashboardParts(schemes: AgentSchemes): AgentDashboardPart[] {
  return schemes.schemes.flatMap((scheme) =>
    scheme.agent.dashboard === undefined ? [] : [scheme.agent.dashboard],
  );
}

function agentBody(
  { report, events, latest, schemeViews }: AgentView,
  range: { bucket: "hour" | "day"; since: Date; to: Date },
  t: DisplayToken,
): SafeHtml {
  const { bucket } = range;
  const schemePanels = schemeViews.flatMap((view) => view.panels.map((panel) => html`${panel}\n`));
  const reasons = reasonRows(events);
  return html`${budgetCards(report, t)}
<div class="controls"><a class="button${bucket === "hour" ? " primary" : ""}" href="?bucket=hour">Last 24 hours, by hour</a><a class="button${bucket === "day" ? " primary" : ""}" href="?bucket=day">Last 30 days, by day</a></div>
${spendCharts(events, bucket, range.since, range.to, t)}
${breakdowns(events, t)}
<section class="panel"><h2>Limits by seller</h2>${table(
    [
      "Seller",
      { label: "Spent", num: true },
      { label: "Reserved", num: true },
      { label: "Limit", num: true },
      { label: "Remaining", num: true },
    ],
    report.perProvider.map(
      (p) =>
        html`<tr><td>${short(p.provider)}</td><td class="num">${money(p.spent, t)}</td><td class="num">${money(p.reserved, t)}</td><td class="num">${limit(p.limit, t)}</td><td class="num">${p.remaining === undefined ? "-" : money(p.remaining, t)}</td></tr>`,
    ),
    "No seller limits and no spend yet.",
  )}</section>
${schemePanels}<section class="panel" id="policy-reasons"><h2>The policy's reasons</h2>${table(["Tool", "Outcome", { label: "Calls", num: true }, "Reason"], reasons, "No decisions recorded in this range.")}
${schemeViews.map((view) => view.policyNotes)}</section>
${refusalsPanel(events, t)}
${latestRun(latest, t)}`;
}

function limit(value: bigint | undefined, t: DisplayToken): string {
  return value === undefined ? "no limit" : money(value, t);
}

function budgetCards(r: BudgetReport, t: DisplayToken): SafeHtml {
  const card = (label: string, value: string, id?: string) =>
    html`<div class="card"><div class="label">${label}</div><div class="value"${id === undefined ? "" : html` id="${id}"`}>${value}</div></div>`;
  return html`<div class="cards">
${card("Spent", money(r.spent.total, t), "agent-spent")}
${card("Reserved", money(r.reserved.total, t))}
${card("Total limit", limit(r.limits.total, t))}
${card("Remaining", r.remaining.total === undefined ? "no limit" : money(r.remaining.total, t))}
${card("Spent today", money(r.spent.daily, t))}
${card("Daily limit", limit(r.limits.daily, t))}
${card("Per call", limit(r.limits.perCall, t))}
${card("Subscriptions", `${money(r.subscriptions.committed, t)} of ${limit(r.limits.maxSubscriptionCommitment, t)}`)}
</div>`;
}

/** Spend per bucket and tool as a uPlot data block (amounts in token units). */
function spendCharts(
  events: RunSpendRow[],
  bucket: "hour" | "day",
  since: Date,
  to: Date,
  t: DisplayToken,
): SafeHtml {
  const step = bucket === "hour" ? HOUR_MS : DAY_MS;
  const start = Math.floor(since.getTime() / step) * step;
  const x: number[] = [];
  for (let s = start; s < to.getTime(); s += step) x.push(s / 1000);
  const tools = [...new Set(events.map((e) => e.tool))].sort();
  const scale = 10 ** t.decimals;
  const values = new Map(tools.map((tool) => [tool, x.map(() => 0n)]));
  for (const e of events) {
    const i = Math.floor((e.at.getTime() - start) / step);
    const row = values.get(e.tool);
    if (row !== undefined && i >= 0 && i < row.length) row[i] = (row[i] ?? 0n) + e.amount;
  }
  const spec = {
    x,
    unit: t.symbol,
    decimals: t.decimals,
    series: tools.map((tool) => ({
      label: tool,
      values: (values.get(tool) ?? []).map((v) => Number(v) / scale),
    })),
  };
  return html`<section class="panel"><h2>Spend over time by tool</h2>${
    tools.length === 0
      ? html`<p class="muted">No recorded spend in this range.</p>`
      : html`<div class="chart" data-chart="chart-agent-tools"></div><script type="application/json" id="chart-agent-tools">${jsonForScript(spec)}</script>`
  }</section>`;
}

function breakdowns(events: RunSpendRow[], t: DisplayToken): SafeHtml {
  const group = (key: (e: RunSpendRow) => string) => {
    const m = new Map<string, { amount: bigint; calls: number; failed: number }>();
    for (const e of events) {
      const k = key(e);
      const g = m.get(k) ?? { amount: 0n, calls: 0, failed: 0 };
      g.amount += e.amount;
      if (e.ok) g.calls++;
      else g.failed++;
      m.set(k, g);
    }
    return [...m.entries()].sort((a, b) =>
      b[1].amount > a[1].amount ? 1 : b[1].amount < a[1].amount ? -1 : 0,
    );
  };
  const panel = (
    title: string,
    label: string,
    rows: [string, { amount: bigint; calls: number; failed: number }][],
    id: string,
    render: (k: string) => SafeHtml | string = (k) => k,
  ) =>
    html`<section class="panel" id="${id}"><h2>${title}</h2>${table(
      [label, { label: "Spent", num: true }, { label: "Calls", num: true }, { label: "Failed", num: true }],
      rows.map(
        ([k, g]) =>
          html`<tr data-key="${k}"><td>${render(k)}</td><td class="num" data-amount="${g.amount.toString()}">${money(g.amount, t)}</td><td class="num">${g.calls}</td><td class="num">${g.failed}</td></tr>`,
      ),
      "Nothing in this range.",
    )}</section>`;
  return html`<div class="grid2">${panel(
    "By tool",
    "Tool",
    group((e) => e.tool),
    "spend-by-tool",
  )}${panel(
    "By seller",
    "Seller",
    group((e) => e.provider),
    "spend-by-seller",
    shortAddress,
  )}</div>
${panel(
  "By mode",
  "Mode",
  group((e) => e.mode),
  "spend-by-mode",
)}`;
}

/**
 * The policy's reasons by tool and outcome: a call refused or failed is counted as such, not under
 * the mode it meant to buy.
 */
function reasonRows(events: RunSpendRow[]): SafeHtml[] {
  const m = new Map<string, { tool: string; mode: string; reason: string; calls: number }>();
  for (const e of events) {
    if (e.reason === null) continue;
    const mode = outcomeOf(e);
    const k = `${e.tool}\u0000${mode}\u0000${e.reason}`;
    const g = m.get(k) ?? { tool: e.tool, mode, reason: e.reason, calls: 0 };
    g.calls++;
    m.set(k, g);
  }
  return [...m.values()].map(
    (g) =>
      html`<tr><td>${g.tool}</td><td>${g.mode}</td><td class="num">${g.calls}</td><td>${g.reason}</td></tr>`,
  );
}

function latestRun(latest: { run: AgentRun; report: SpendReport } | undefined, t: DisplayToken): SafeHtml {
  if (latest === undefined)
    return html`<section class="panel"><h2>Latest run</h2><p class="muted">No run recorded yet.</p></section>`;
  const { run, report } = latest;
  const rows = report.tools.map((x) => {
    const modes = Object.entries(x.modes)
      .map(([mode, n]) => `${mode}×${n}`)
      .join(" ");
    const hindsight =
      x.hindsight.cheapest === undefined
        ? "-"
        : `${x.hindsight.cheapest} (one-time ${x.hindsight.oneTime === undefined ? "-" : money(x.hindsight.oneTime, t)}, subscription ${x.hindsight.subscription === undefined ? "-" : money(x.hindsight.subscription, t)})`;
    return html`<tr><td>${x.tool}</td><td>${shortAddress(x.provider)}</td><td class="num">${x.calls}</td><td class="num">${x.failed}</td><td>${modes}</td><td class="num">${money(x.amount, t)}</td><td>${hindsight}</td></tr>`;
  });
  return html`<section class="panel" id="latest-run"><h2>Latest run's spend report</h2>
<p class="muted"><code>${run.run_id}</code> · started ${when(run.started_at)} · ${run.finished_at === null ? "not finished" : `finished ${when(run.finished_at)}`} · total ${money(report.total, t)}</p>
${table(["Tool", "Seller", { label: "Calls", num: true }, { label: "Failed", num: true }, "Modes", { label: "Spent", num: true }, "Cheapest in hindsight"], rows, "The run spent nothing.")}</section>`;
}
