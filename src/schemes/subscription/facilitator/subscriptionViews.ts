/**
 * The provider's Subscriptions page of the dashboard, contributed by the subscription part: the
 * subscriptions of its plans by state with their renewal dates, metered usage against caps, and
 * failed renewals (from the event log), plans named by their terms. Every read is scoped to the
 * signed-in provider.
 */
import { getAddress } from "viem";
import { recentEventsOf } from "../../../facilitator/dashboard/providerRecords.ts";
import { type ProviderView, providerOf } from "../../../facilitator/dashboard/providerSection.ts";
import { describeFailureMessage, describeRevert } from "../../../facilitator/dashboard/revertReason.ts";
import { type DisplayToken, money, page, short, table, when } from "../../../http/dashboardLayout.ts";
import { html, type SafeHtml } from "../../../http/html.ts";
import { routeDoc } from "../../../http/routeDocs.ts";
import type { Store } from "../../../store/store.ts";
import { planNamesOf } from "./planTerms.ts";
import { subscriptionsOfProvider } from "./providerPlanRecords.ts";
import type { IndexScope } from "./subscriptionRecords.ts";

export type SubscriptionViewsDeps = {
  store: Store;
  token: DisplayToken;
  /** The SubscriptionManager's index scope; absent on a facilitator without one. */
  scope: IndexScope | undefined;
};

const subscriptionsDoc = routeDoc({
  summary: "Dashboard: the subscriptions of the provider's plans",
  response: { media: "text/html" },
  errors: [403],
});

/** The provider's Subscriptions page, `/subscriptions`. */
export function mountSubscriptionViews(deps: SubscriptionViewsDeps): ProviderView {
  return {
    nav: [{ href: "/dashboard/provider/subscriptions", label: "Subscriptions", order: 30 }],
    mount(app, providerFrame) {
      app.get("/subscriptions", subscriptionsDoc, async (c) => {
        const session = c.get("session");
        const provider = providerOf(session);
        const frame = providerFrame(session, "Subscriptions", "/dashboard/provider/subscriptions");
        if (deps.scope === undefined) {
          return c.html(
            page(frame, html`<p class="muted">This facilitator runs no SubscriptionManager.</p>`),
          );
        }
        const [subs, failed, plans] = await Promise.all([
          subscriptionsOfProvider(deps.store, deps.scope, provider),
          recentEventsOf(deps.store, provider, ["subscription.renewal_failed"]),
          planNamesOf(deps.store, deps.scope)(provider, deps.token),
        ]);
        return c.html(page(frame, subscriptionsView(deps.token, subs, failed, plans)));
      });
    },
  };
}

type Subs = Awaited<ReturnType<typeof subscriptionsOfProvider>>;
type Events = Awaited<ReturnType<typeof recentEventsOf>>;

function subscriptionsView(
  token: DisplayToken,
  subs: Subs,
  failed: Events,
  plans: ReadonlyMap<string, string>,
): SafeHtml {
  const planName = (id: string) => plans.get(id) ?? id;
  const states = ["Active", "Paused", "PastDue", "Cancelled"] as const;
  const label = { Active: "active", Paused: "paused", PastDue: "past due", Cancelled: "cancelled" } as const;
  const cards = states.map(
    (s) =>
      html`<div class="card"><div class="label">${label[s]}</div><div class="value" data-state="${s}">${subs.filter((x) => x.status === s).length}</div></div>`,
  );
  const rows = subs.map(
    (s) =>
      html`<tr><td>${s.subscription_id}</td><td>${planName(s.plan_id.toString())}</td><td>${short(getAddress(s.subscriber))}</td><td><span class="pill ${s.status}">${label[s.status]}</span></td><td>${when(s.created_at_chain)}</td><td>${s.status === "Active" || s.status === "PastDue" ? when(s.current_period_end) : "-"}</td></tr>`,
  );
  const metered = subs
    .filter((s) => s.max_overage > 0n && s.status !== "Cancelled")
    .map((s) => {
      const pct = Number((s.overage_used * 1000n) / s.max_overage) / 10;
      return html`<tr><td>${s.subscription_id}</td><td>${planName(s.plan_id.toString())}</td><td>${short(getAddress(s.subscriber))}</td><td class="num">${money(s.overage_used, token)}</td><td class="num">${money(s.max_overage, token)}</td><td><meter min="0" max="100" low="70" high="90" optimum="0" value="${pct}">${pct}%</meter> ${pct}%</td></tr>`;
    });
  const failures = failed.map((e) => {
    const d = e.data;
    const text = (k: string) => (typeof d[k] === "string" ? (d[k] as string) : "-");
    const amount =
      typeof d.amount === "string" && /^[0-9]{1,78}$/.test(d.amount) ? money(BigInt(d.amount), token) : "-";
    return html`<tr><td>${when(e.created_at)}</td><td>${text("subscriptionId")}</td><td>${text("planId") === "-" ? "-" : planName(text("planId"))}</td><td>${text("subscriber") === "-" ? "-" : short(text("subscriber"))}</td><td class="num">${amount}</td><td>${failureReason(d)}</td></tr>`;
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

/**
 * A failed renewal's reason: the revert the token or manager gave, decoded (`ERC20InsufficientBalance(…)`),
 * with the indexer's explanation beside it; events without revert data show their message alone.
 */
function failureReason(data: Record<string, unknown>): SafeHtml {
  const revert = typeof data.reason === "string" ? describeRevert(data.reason) : undefined;
  const message = typeof data.message === "string" ? describeFailureMessage(data.message) : undefined;
  if (revert === undefined) return html`${message ?? "-"}`;
  return html`<code>${revert}</code>${message === undefined ? "" : html`<br><span class="muted">${message}</span>`}`;
}
