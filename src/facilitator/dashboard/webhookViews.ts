/**
 * The provider's webhook endpoints with their health (success rate, last failure, failing or not), their
 * latest deliveries, a retry button on each dead (or delivered) one and secret rotation — through the webhook repository the `/webhooks` API uses, so
 * the same ownership checks and state rules apply. A rotated secret is shown once, in the reply to the
 * rotation (not cached), never in a URL.
 */
import type { Hono } from "hono";
import { z } from "zod";
import { csrfField, page, table, when } from "../../http/dashboardLayout.ts";
import { html, type SafeHtml } from "../../http/html.ts";
import { routeDoc } from "../../http/routeDocs.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import type { WebhookRepository } from "../webhooks/createWebhookRepository.ts";
import type { WebhookDelivery } from "../webhooks/webhookApi.ts";
import type { DashboardEnv } from "./dashboardApp.ts";
import { type ProviderFrame, type ProviderView, providerOf } from "./providerSection.ts";
import { type WebhookHealth, webhookHealth } from "./webhookHealthRecords.ts";

export type WebhookViewsDeps = {
  repository: WebhookRepository;
  clock: { now(): number };
  /** The store the webhook attempts are in, for each endpoint's health; without it none is shown. */
  store?: Queryable | undefined;
  /** How long a rotated-out secret keeps signing (the API's default: one day). */
  graceSeconds?: number | undefined;
};

const ENDPOINT_ID = /^we_[A-Za-z0-9_-]{16,64}$/;
const DELIVERY_ID = /^[0-9]{1,15}$/;
const DELIVERIES_SHOWN = 10;
const NOTICES = { retried: "The delivery is queued and will be sent again shortly." } as const;
const NoticeSchema = z.enum(["retried"]).optional().catch(undefined);

const docs = {
  list: routeDoc({
    summary: "Dashboard: the provider's webhook endpoints and recent deliveries",
    response: { media: "text/html" },
    errors: [403],
  }),
  rotate: routeDoc({
    summary: "Dashboard: rotate an endpoint's signing secret (the page shows the new one once)",
    request: "form",
    response: { media: "text/html" },
    errors: [400, 401, 403, 404],
  }),
  retry: routeDoc({
    summary: "Dashboard: queue a finished delivery again (303)",
    request: "form",
    status: 303,
    errors: [400, 401, 403, 404],
  }),
};

/** The provider's Webhooks page: `/webhooks` (list), `…/:id/rotate` and `…/:id/deliveries/:deliveryId/retry`. */
export function mountWebhookViews(deps: WebhookViewsDeps): ProviderView {
  return { nav: [{ href: "/dashboard/provider/webhooks", label: "Webhooks", order: 40 }], mount };

  function mount(app: Hono<DashboardEnv>, providerFrame: ProviderFrame): void {
    const now = () => new Date(deps.clock.now());
    const grace = deps.graceSeconds ?? 86_400;
    const render = async (
      session: DashboardEnv["Variables"]["session"],
      notice?: { text: string; error?: boolean },
      rotated?: { id: string; secret: string },
    ) => {
      const provider = providerOf(session);
      const [endpoints, health] = await Promise.all([
        deps.repository.list(provider, now()),
        deps.store === undefined ? undefined : webhookHealth(deps.store, provider, now()),
      ]);
      const withDeliveries = await Promise.all(
        endpoints.map(async (e) => ({
          endpoint: e,
          deliveries: await deps.repository.listDeliveries(provider, e.id, { limit: DELIVERIES_SHOWN }),
        })),
      );
      const body =
        withDeliveries.length === 0
          ? html`<p class="muted">No webhook endpoints. Register one with <code>tollgate webhooks add &lt;url&gt;</code>.</p>`
          : html`${withDeliveries.map(({ endpoint, deliveries }) =>
              endpointPanel(
                session.csrfToken,
                endpoint,
                deliveries,
                rotated?.id === endpoint.id ? rotated.secret : undefined,
                health === undefined ? undefined : (health.get(endpoint.id) ?? null),
              ),
            )}`;
      return page(providerFrame(session, "Webhooks", "/dashboard/provider/webhooks", notice), body);
    };

    app.get("/webhooks", docs.list, async (c) => {
      const done = NoticeSchema.parse(c.req.query("done"));
      return c.html(await render(c.get("session"), done === undefined ? undefined : { text: NOTICES[done] }));
    });

    app.post("/webhooks/:id/rotate", docs.rotate, async (c) => {
      const session = c.get("session");
      const id = endpointId(c.req.param("id"));
      const rotated = await deps.repository.rotateSecret(providerOf(session), id, grace, now());
      const until = rotated.previousSecretExpiresAt;
      return c.html(
        await render(
          session,
          {
            text: `New signing secret for ${id}; it is shown only now. The old secret keeps signing until ${until === null ? "now" : when(new Date(until))}.`,
          },
          { id, secret: rotated.secret },
        ),
      );
    });

    app.post("/webhooks/:id/deliveries/:deliveryId/retry", docs.retry, async (c) => {
      const session = c.get("session");
      const id = endpointId(c.req.param("id"));
      const deliveryId = c.req.param("deliveryId");
      if (!DELIVERY_ID.test(deliveryId))
        throw new TollgateError("NotFound", "no delivery with that id for this endpoint");
      await deps.repository.retryDelivery(providerOf(session), id, deliveryId, now());
      return c.redirect("/dashboard/provider/webhooks?done=retried", 303);
    });
  }
}

function endpointId(id: string): string {
  if (!ENDPOINT_ID.test(id)) throw new TollgateError("NotFound", "no webhook endpoint with that id");
  return id;
}

function endpointPanel(
  csrf: string,
  endpoint: Awaited<ReturnType<WebhookRepository["list"]>>[number],
  deliveries: WebhookDelivery[],
  newSecret: string | undefined,
  health: WebhookHealth | null | undefined,
): SafeHtml {
  const rows = deliveries.map((d) => {
    const last = d.history[0];
    const result =
      last === undefined
        ? "-"
        : last.statusCode !== null
          ? `HTTP ${last.statusCode}`
          : (last.error ?? "no answer");
    const retry =
      d.status === "dead" || d.status === "delivered"
        ? html`<form method="post" class="inline" action="/dashboard/provider/webhooks/${endpoint.id}/deliveries/${d.id}/retry">${csrfField(csrf)}<button type="submit" data-delivery="${d.id}">${d.status === "dead" ? "Retry" : "Send again"}</button></form>`
        : "";
    return html`<tr data-delivery-row="${d.id}"><td>${d.id}</td><td>${d.eventType}</td><td><code>${d.eventId}</code></td><td><span class="pill ${d.status}" data-status="${d.status}">${d.status}</span></td><td class="num">${d.attempts}</td><td>${result}</td><td>${when(new Date(d.createdAt))}</td><td>${retry}</td></tr>`;
  });
  return html`<section class="panel" data-endpoint="${endpoint.id}">
<h2>${endpoint.url}</h2>
<p class="muted"><code>${endpoint.id}</code> · events: ${endpoint.events === null ? "all" : endpoint.events.join(", ")}${endpoint.description === null ? "" : ` · ${endpoint.description}`} · since ${when(new Date(endpoint.createdAt))}${endpoint.previousSecretExpiresAt === null ? "" : ` · previous secret signs until ${when(new Date(endpoint.previousSecretExpiresAt))}`}</p>
${health === undefined ? "" : healthLine(health)}
${newSecret === undefined ? "" : html`<p>New secret: <span class="secret" id="new-secret">${newSecret}</span></p>`}
<form method="post" class="inline" action="/dashboard/provider/webhooks/${endpoint.id}/rotate" data-confirm="Issue a new signing secret? The old one keeps signing for a day.">${csrfField(csrf)}<button type="submit">Rotate secret</button></form>
<h3>Latest deliveries</h3>
${table(["Id", "Event", "Event id", "Status", { label: "Attempts", num: true }, "Last result", "Queued", ""], rows, "No deliveries yet.")}
</section>`;
}

/** The endpoint's health over its latest attempts; `null` when it had none lately. */
function healthLine(health: WebhookHealth | null): SafeHtml {
  if (health === null) {
    return html`<p class="health" data-health="unknown">No delivery attempts in the last week.</p>`;
  }
  const rate = Math.round((health.succeeded / health.attempts) * 100);
  const state = health.failing
    ? html`<span class="pill dead" data-health="failing">failing</span>`
    : html`<span class="pill delivered" data-health="ok">answering</span>`;
  const failure =
    health.lastFailure === undefined
      ? ""
      : html` · last failure ${when(health.lastFailure.at)}: <span data-last-failure>${health.lastFailure.reason}</span>`;
  return html`<p class="health">${state} ${rate}% of the last ${health.attempts} attempt${health.attempts === 1 ? "" : "s"} succeeded${failure}</p>`;
}
