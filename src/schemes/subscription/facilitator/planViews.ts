/**
 * The provider's plans on the SubscriptionManager: listed from the subscription index; created and
 * deprecated (with a successor) through the same chain actions `tollgate plan` sends. Plans are paid
 * to whoever creates them, so these actions are sent from the provider's own key: the dashboard offers
 * them only where it was given a signer for the signed-in provider (`planSigner`, e.g. the devnet's
 * dev keys or a local `tollgate dashboard`); elsewhere it shows the `tollgate plan` command to run.
 * After the transaction is mined the page waits (bounded) for the index to show the change.
 */

import type { Hono } from "hono";
import type { Address, Chain, PublicClient, Transport } from "viem";
import { z } from "zod";
import { createPlan } from "../../../chain/actions/subscriptions/createPlan.ts";
import { deprecatePlan } from "../../../chain/actions/subscriptions/deprecatePlan.ts";
import type { WriteClient } from "../../../chain/clientTypes.ts";
import { getPlanIdFromReceipt } from "../../../chain/events/decodeSubscriptionEvents.ts";
import type { DashboardEnv } from "../../../facilitator/dashboard/dashboardApp.ts";
import {
  type ProviderFrame,
  type ProviderView,
  providerOf,
} from "../../../facilitator/dashboard/providerSection.ts";
import { csrfField, type DisplayToken, duration, money, page, table } from "../../../http/dashboardLayout.ts";
import { html, type SafeHtml } from "../../../http/html.ts";
import { routeDoc } from "../../../http/routeDocs.ts";
import { parseUnitsExact } from "../../../protocol/amount.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { Store } from "../../../store/store.ts";
import { plansOfProvider } from "./providerPlanRecords.ts";
import { findPlan, type IndexScope, type PlanRow } from "./subscriptionRecords.ts";

export type PlanViewsDeps = {
  store: Store;
  scope: IndexScope | undefined;
  /** The token new plans are priced in and amounts are shown in. */
  token: DisplayToken & { address: Address };
  publicClient: Pick<PublicClient<Transport, Chain>, "waitForTransactionReceipt">;
  /** A wallet for the provider's own key, when this dashboard may send its plan transactions. */
  planSigner?: ((provider: Address) => WriteClient | undefined) | undefined;
  /** How long to wait for the index to show a mined change (default 15 s). */
  indexWaitMs?: number | undefined;
  sleep?: ((ms: number) => Promise<void>) | undefined;
};

const PlanIdText = z.string().regex(/^[1-9][0-9]{0,30}$/, "expected a plan id");

const CreatePlanFormSchema = z.object({
  amount: z.string().trim().min(1).max(40),
  interval: z
    .string()
    .trim()
    .regex(/^[0-9]{1,9}[smhdw]?$/, "use e.g. 30d, 12h, 90m or seconds"),
  included: z
    .string()
    .trim()
    .regex(/^[0-9]{0,15}$/, "included units must be a whole number")
    .default(""),
  overage: z.string().trim().max(40).default(""),
});

const DeprecateFormSchema = z.object({
  successor: z.union([z.literal(""), PlanIdText]).default(""),
});

const NOTICES = {
  created: "Plan created.",
  deprecated: "Plan deprecated.",
  pending: "The transaction is mined; the index will show the change within moments.",
} as const;
const NoticeSchema = z.enum(["created", "deprecated", "pending"]).optional().catch(undefined);

const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3_600, d: 86_400, w: 604_800 };

const docs = {
  list: routeDoc({
    summary: "Dashboard: the provider's plans, with a form to create one",
    response: { media: "text/html" },
    errors: [403],
  }),
  create: routeDoc({
    summary: "Dashboard: create a plan on chain with the configured plan signer (303 to the plans)",
    request: "form",
    status: 303,
    errors: [400, 401, 403, 404, 503],
  }),
  deprecate: routeDoc({
    summary: "Dashboard: deprecate one of the provider's plans on chain (303 to the plans)",
    request: "form",
    status: 303,
    errors: [400, 401, 403, 404, 503],
  }),
};

/** The provider's Plans page: `/plans`, `/plans/create` and `/plans/:id/deprecate`. */
export function mountPlanViews(deps: PlanViewsDeps): ProviderView {
  return {
    nav: [{ href: "/dashboard/provider/plans", label: "Plans", order: 50 }],
    mount: (app, providerFrame) => mountPlans(app, providerFrame, deps),
  };
}

function mountPlans(app: Hono<DashboardEnv>, providerFrame: ProviderFrame, deps: PlanViewsDeps): void {
  app.get("/plans", docs.list, async (c) => {
    const session = c.get("session");
    const provider = providerOf(session);
    const done = NoticeSchema.parse(c.req.query("done"));
    const frame = providerFrame(
      session,
      "Plans",
      "/dashboard/provider/plans",
      done === undefined ? undefined : { text: NOTICES[done] },
    );
    if (deps.scope === undefined) {
      return c.html(page(frame, html`<p class="muted">This facilitator runs no SubscriptionManager.</p>`));
    }
    const plans = await plansOfProvider(deps.store, deps.scope, provider);
    const canSign = deps.planSigner?.(provider) !== undefined;
    return c.html(page(frame, plansView(deps.token, session.csrfToken, plans, canSign)));
  });

  app.post("/plans/create", docs.create, async (c) => {
    const provider = providerOf(c.get("session"));
    const signer = signerFor(deps, provider);
    const form = parseForm(CreatePlanFormSchema, c.get("form"));
    const amount = parseUnitsExact(form.amount, deps.token.decimals);
    if (amount <= 0n) throw new TollgateError("InvalidAmount", "a plan's price must be above zero");
    const match = /^([0-9]+)([smhdw]?)$/.exec(form.interval);
    const interval = BigInt(Number(match?.[1] ?? "0") * (UNIT_SECONDS[match?.[2] || "s"] ?? 1));
    if (interval <= 0n) throw new TollgateError("InvalidRequest", "a plan's interval must be above zero");
    const overage = form.overage === "" ? 0n : parseUnitsExact(form.overage, deps.token.decimals);
    const hash = await createPlan(signer, {
      manager: scopeOf(deps).manager,
      token: deps.token.address,
      amount,
      interval,
      includedUnits: BigInt(form.included === "" ? "0" : form.included),
      overageUnitPrice: overage,
    });
    const receipt = await deps.publicClient.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success")
      throw new TollgateError("InvalidRequest", "the plan transaction reverted");
    const planId = getPlanIdFromReceipt(receipt);
    const indexed = await waitForIndex(deps, planId, () => true);
    return c.redirect(`/dashboard/provider/plans?done=${indexed ? "created" : "pending"}`, 303);
  });

  app.post("/plans/:id/deprecate", docs.deprecate, async (c) => {
    const provider = providerOf(c.get("session"));
    const scope = scopeOf(deps);
    const planId = BigInt(parseForm(PlanIdText, c.req.param("id")));
    const form = parseForm(DeprecateFormSchema, c.get("form"));
    const plan = await findPlan(deps.store, scope, planId);
    // Only the provider's own plans (the chain would refuse another's anyway, after gas).
    if (plan === undefined || plan.provider !== provider.toLowerCase()) {
      throw new TollgateError("NotFound", "no plan of yours with that id");
    }
    const successor = form.successor === "" ? 0n : BigInt(form.successor);
    if (successor !== 0n) {
      const next = await findPlan(deps.store, scope, successor);
      if (next === undefined || next.provider !== provider.toLowerCase() || successor === planId) {
        throw new TollgateError("InvalidRequest", "the successor must be another plan of yours", {
          details: { reason: "bad_successor" },
        });
      }
    }
    const hash = await deprecatePlan(signerFor(deps, provider), {
      manager: scope.manager,
      planId,
      successorPlanId: successor,
    });
    const receipt = await deps.publicClient.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success") throw new TollgateError("InvalidRequest", "the deprecation reverted");
    const indexed = await waitForIndex(deps, planId, (row) => row.deprecated);
    return c.redirect(`/dashboard/provider/plans?done=${indexed ? "deprecated" : "pending"}`, 303);
  });
}

/** Polls the index until `done` holds for the plan, or the wait is over. */
async function waitForIndex(
  deps: PlanViewsDeps,
  planId: bigint,
  done: (row: PlanRow) => boolean,
): Promise<boolean> {
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const waitMs = deps.indexWaitMs ?? 15_000;
  const scope = deps.scope;
  if (scope === undefined) return false;
  for (let waited = 0; waited <= waitMs; waited += 200) {
    const row = await findPlan(deps.store, scope, planId);
    if (row !== undefined && done(row)) return true;
    await sleep(200);
  }
  return false;
}

function signerFor(deps: PlanViewsDeps, provider: Address): WriteClient {
  const signer = deps.planSigner?.(provider);
  if (signer === undefined) {
    throw new TollgateError("Forbidden", "this dashboard holds no key for your plans; use tollgate plan", {
      details: { reason: "no_plan_signer" },
    });
  }
  return signer;
}

function scopeOf(deps: PlanViewsDeps): IndexScope {
  if (deps.scope === undefined)
    throw new TollgateError("NotFound", "this facilitator runs no SubscriptionManager");
  return deps.scope;
}

function parseForm<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new TollgateError("InvalidRequest", parsed.error.issues.map((i) => i.message).join("; "));
  }
  return parsed.data as z.output<S>;
}

function plansView(token: DisplayToken, csrf: string, plans: PlanRow[], canSign: boolean): SafeHtml {
  const live = plans.filter((p) => !p.deprecated);
  const rows = plans.map((p) => {
    const id = p.plan_id.toString();
    const successorOptions = live
      .filter((o) => o.plan_id !== p.plan_id)
      .map((o) => html`<option value="${o.plan_id.toString()}">plan ${o.plan_id.toString()}</option>`);
    const action = p.deprecated
      ? html`<span class="pill deprecated">deprecated</span>${p.successor_plan_id !== null && p.successor_plan_id !== 0n ? html` → plan ${p.successor_plan_id.toString()}` : ""}`
      : canSign
        ? html`<form method="post" class="inline" action="/dashboard/provider/plans/${id}/deprecate" data-plan="${id}">${csrfField(csrf)}<select name="successor" aria-label="successor of plan ${id}"><option value="">no successor</option>${successorOptions}</select> <button type="submit">Deprecate</button></form>`
        : html`<code>tollgate plan deprecate ${id} --successor &lt;id&gt;</code>`;
    return html`<tr data-plan-row="${id}"><td>${id}</td><td class="num">${money(p.amount, token)}</td><td>${duration(p.interval_seconds)}</td><td class="num">${p.included_units.toString()}</td><td class="num">${money(p.overage_unit_price, token)}</td><td>${p.deprecated ? "deprecated" : "open"}</td><td>${action}</td></tr>`;
  });
  const create = canSign
    ? html`<section class="panel"><h2>New plan</h2>
<form method="post" action="/dashboard/provider/plans/create" id="create-plan">${csrfField(csrf)}
<label>Price per period (${token.symbol}) <input name="amount" required placeholder="9"></label>
<label>Interval <input name="interval" required placeholder="30d"></label>
<label>Included units <input name="included" placeholder="0"></label>
<label>Overage per unit (${token.symbol}) <input name="overage" placeholder="0.001"></label>
<button class="primary" type="submit">Create plan</button></form></section>`
    : html`<p class="muted">Plans are sent from your own key: create them with <code>tollgate plan create --amount 9 --interval 30d</code>.</p>`;
  return html`<section class="panel">${table(
    [
      "Plan",
      { label: "Price", num: true },
      "Interval",
      { label: "Included", num: true },
      { label: "Overage/unit", num: true },
      "State",
      "",
    ],
    rows,
    "No plans yet.",
  )}</section>${create}`;
}
