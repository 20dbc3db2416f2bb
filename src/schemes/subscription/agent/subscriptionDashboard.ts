/**
 * The subscription scheme's panels on the agent operator's page of one agent: the subscriptions the
 * agent holds, with their state and next renewal, and under the policy's reasons the plans the
 * policy decided to cancel (with why). Read from the agents' store; renewal dates from the host
 * (the facilitator's index or the chain), asked after the page released the store.
 */
import type { AgentDashboardHost, AgentDashboardPart } from "../../../agent/dashboard/agentDashboardPart.ts";
import { type CancelClaims, createCancelClaims } from "../../../agent/policy/cancelUnneededSubscriptions.ts";
import { shortAddress, table, when } from "../../../http/dashboardLayout.ts";
import { html, type SafeHtml } from "../../../http/html.ts";
import { type AgentSubscriptionRecord, listSubscriptions } from "./agentSubscriptionRecords.ts";

type CancelClaim = Awaited<ReturnType<CancelClaims["list"]>>[number];

/** An agent's subscriptions, newest first, and the cancels the policy claimed for it. */
export const subscriptionDashboard: AgentDashboardPart = {
  async load(store, agent, host) {
    const claims = createCancelClaims({ store, clock: host.clock });
    const subs = await listSubscriptions(store, agent);
    const subscribers = [...new Set(subs.map((s) => s.subscriber))];
    const cancels = (await Promise.all(subscribers.map((s) => claims.list(s))))
      .flat()
      .filter((x) => x.agent === agent);
    return {
      async render() {
        const renewals = await nextRenewals(subs, host);
        return { panels: [heldPanel(subs, renewals)], policyNotes: cancelsTable(cancels) };
      },
    };
  },
};

/** Each active subscription's next renewal (unix seconds), `undefined` where it is not known. */
function nextRenewals(
  subs: readonly AgentSubscriptionRecord[],
  host: AgentDashboardHost,
): Promise<(number | undefined)[]> {
  const { nextRenewal } = host;
  return Promise.all(
    subs.map(async (s) =>
      s.subscriptionId === undefined || s.status !== "active" || nextRenewal === undefined
        ? undefined
        : nextRenewal(s.manager, s.subscriptionId).catch(() => undefined),
    ),
  );
}

function heldPanel(
  subs: readonly AgentSubscriptionRecord[],
  renewals: readonly (number | undefined)[],
): SafeHtml {
  const rows = subs.map(
    (s, i) =>
      html`<tr><td>${s.subscriptionId?.toString() ?? "-"}</td><td>${s.planId}</td><td>${shortAddress(s.provider)}</td><td><span class="pill ${s.status === "active" ? "Active" : s.status === "ended" ? "Cancelled" : "Paused"}">${s.status}</span></td><td>${when(s.claimedAt)}</td><td>${renewals[i] === undefined ? "-" : when(renewals[i])}</td></tr>`,
  );
  return html`<section class="panel"><h2>Subscriptions held</h2>${table(["Subscription", "Plan", "Seller", "State", "Since", "Next renewal"], rows, "No subscriptions.")}</section>`;
}

function cancelsTable(cancels: readonly CancelClaim[]): SafeHtml | string {
  return cancels.length === 0
    ? ""
    : table(
        ["Subscription", "Cancel", "Reason"],
        cancels.map(
          (x) => html`<tr><td>${x.subscriptionId}</td><td>${x.status}</td><td>${x.reason}</td></tr>`,
        ),
        "",
      );
}
