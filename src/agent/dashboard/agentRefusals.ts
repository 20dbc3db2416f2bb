/**
 * What the agent was refused and what failed, from its recorded spend events: each call that did not
 * succeed with its error code, what the code means, and the policy's reason for the payment it meant
 * to make. A call the agent's own budget or policy stopped (`BudgetExceeded`, `ApprovalDenied`, …) is
 * "refused"; one the seller or the chain failed is "failed". The events keep the code, not the
 * thrown message, so the meaning shown is the code's.
 */
import { type DisplayToken, money, shortAddress, table, when } from "../../http/dashboardLayout.ts";
import { html, type SafeHtml } from "../../http/html.ts";
import type { RunSpendRow } from "./runSpendRecords.ts";

/** Rows shown in the refusals panel, newest first. */
const REFUSALS_SHOWN = 50;

/** The agent's own refusals: nothing was paid because its budget or policy said no. */
const REFUSAL_CODES: Readonly<Record<string, string>> = {
  BudgetExceeded: "the budget's limits do not allow this spend",
  ApprovalDenied: "the spend is above the approval threshold and was not approved",
  PriceCeilingExceeded: "the price is above the ceiling set for the tool",
  OfferMismatch: "the seller's 402 asked for other terms than it listed",
  SaleNotAdmitted: "the reseller could not take the sale on its own budget",
};

const FAILURE_MEANINGS: Readonly<Record<string, string>> = {
  SellerUnreachable: "the seller's server did not answer",
  PaidRequestFailed: "the seller failed the request after it was paid",
  InsufficientFunds: "the wallet's balance is below the amount",
  ChainUnavailable: "the chain could not be reached",
  PaymentRequired: "the seller still asked for payment",
};

/** How a call ended for the tables: its spend mode when it succeeded, else `refused` or `failed`. */
export function outcomeOf(row: Pick<RunSpendRow, "ok" | "mode" | "error">): string {
  if (row.ok) return row.mode;
  return row.error !== null && Object.hasOwn(REFUSAL_CODES, row.error) ? "refused" : "failed";
}

function meaningOf(code: string | null): string {
  if (code === null) return "-";
  return REFUSAL_CODES[code] ?? FAILURE_MEANINGS[code] ?? "-";
}

/** The panel of calls that were refused or failed in the range, newest first. */
export function refusalsPanel(events: RunSpendRow[], t: DisplayToken): SafeHtml {
  const failed = events.filter((e) => !e.ok);
  const rows = failed
    .slice(-REFUSALS_SHOWN)
    .reverse()
    .map(
      (e) =>
        html`<tr data-refusal="${e.error ?? ""}"><td>${when(e.at)}</td><td>${e.tool}</td><td>${shortAddress(e.provider)}</td><td><span class="pill ${outcomeOf(e) === "refused" ? "dead" : "pending"}">${outcomeOf(e)}</span></td><td><code>${e.error ?? "-"}</code></td><td>${meaningOf(e.error)}</td><td>${e.reason ?? "-"}</td><td class="num">${money(e.amount, t)}</td></tr>`,
    );
  const more =
    failed.length > REFUSALS_SHOWN
      ? html`<p class="muted">The latest ${REFUSALS_SHOWN} of ${failed.length}.</p>`
      : "";
  return html`<section class="panel" id="refusals"><h2>Refused and failed calls</h2>${more}${table(
    ["When", "Tool", "Seller", "Outcome", "Code", "Meaning", "Policy's reason", { label: "Paid", num: true }],
    rows,
    "No refused or failed calls in this range.",
  )}</section>`;
}
