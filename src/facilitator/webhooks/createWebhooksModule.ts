/**
 * The facilitator's webhooks module (docs/webhooks.md): provider-authenticated endpoint management and the
 * background outbox worker that delivers the event log to those endpoints.
 *
 * Routes (all need `Authorization: Bearer <provider API key>`; a provider sees only its own):
 * - `POST /webhooks` `{url, events?, description?}` → 201 the endpoint with its `secret` (shown once)
 * - `GET /webhooks` → `{webhooks}`
 * - `DELETE /webhooks/:id` → `{id, deleted: true}`
 * - `POST /webhooks/:id/rotate-secret` `{graceSeconds?}` → the new secret
 * - `GET /webhooks/:id/deliveries?status&limit&before` → recent deliveries with their attempts
 * - `POST /webhooks/:id/deliveries/:deliveryId/retry` → requeues a dead letter
 */
import { randomBytes as nodeRandomBytes } from "node:crypto";
import type { Context, Hono } from "hono";
import { Counter } from "prom-client";
import { readJsonBody } from "../../http/httpErrors.ts";
import { routeDoc } from "../../http/routeDocs.ts";
import {
  createWebhookTargetPolicy,
  type WebhookLookup,
  type WebhookTargetPolicy,
} from "../../http/webhookTargets.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import type { FacilitatorContext } from "../facilitatorContext.ts";
import type { FacilitatorModuleFactory } from "../facilitatorModule.ts";
import { requireProvider } from "../providers/requireProvider.ts";
import { createWebhookRepository, type WebhookRepository } from "./createWebhookRepository.ts";
import {
  createWebhookWorker,
  type WebhookDeliveryOutcome,
  type WebhookFetch,
  type WebhookWorkerOptions,
} from "./createWebhookWorker.ts";
import { pinnedWebhookFetch } from "./pinnedWebhookFetch.ts";
import {
  CreateWebhookRequestSchema,
  type CreateWebhookResponse,
  CreateWebhookResponseSchema,
  type DeleteWebhookResponse,
  DeleteWebhookResponseSchema,
  ListWebhookDeliveriesQuerySchema,
  type ListWebhookDeliveriesResponse,
  ListWebhookDeliveriesResponseSchema,
  type ListWebhooksResponse,
  ListWebhooksResponseSchema,
  type RetryWebhookDeliveryResponse,
  RetryWebhookDeliveryResponseSchema,
  RotateWebhookSecretRequestSchema,
  RotateWebhookSecretResponseSchema,
} from "./webhookApi.ts";
import { createWebhookSecretBox } from "./webhookSecretBox.ts";

export type WebhooksModuleOptions = Pick<
  WebhookWorkerOptions,
  "retry" | "timeoutMs" | "leaseMs" | "concurrency" | "fanOutBatchSize" | "pollIntervalMs" | "retentionMs"
> & {
  /**
   * Sends deliveries (default `pinnedWebhookFetch`). It is handed the checked target and must connect
   * to its address; targets are checked before it is called, whatever it is.
   */
  fetch?: WebhookFetch | undefined;
  /**
   * Non-public addresses webhooks may go to anyway: CIDRs or addresses (`127.0.0.0/8`, `::1`). Empty by
   * default, which refuses loopback, link-local, private and reserved targets (SSRF). For development
   * (`TOLLGATE_WEBHOOK_ALLOW_TARGETS`, `--webhook-allow-targets`) or receivers deliberately on a private
   * network.
   */
  allowTargets?: readonly string[] | undefined;
  /** DNS for target checks (default `dns.lookup`, every address). */
  lookup?: WebhookLookup | undefined;
  /**
   * Keys that seal webhook secrets at rest (32 bytes each; the first seals, all open). Without them a
   * key is generated for this process only, and secrets stored by it cannot be used after a restart:
   * production passes the configured keys (`TOLLGATE_WEBHOOK_KEYS` or the key file, see
   * loadFacilitatorConfig).
   */
  secretKeys?: readonly Uint8Array[] | undefined;
  /** Backoff jitter source in [0, 1) (default `Math.random`). */
  random?: (() => number) | undefined;
  /** Random bytes for endpoint ids and secrets (default node:crypto). */
  randomBytes?: ((size: number) => Uint8Array) | undefined;
  maxEndpointsPerProvider?: number | undefined;
  /** Run the delivery worker in this process (default true); routes are served either way. */
  runWorker?: boolean | undefined;
  /** Grace period of a rotated-out secret when the request names none (default one day). */
  defaultGraceSeconds?: number | undefined;
};

const ENDPOINT_ID = /^we_[A-Za-z0-9_-]{16,64}$/;
const DELIVERY_ID = /^[0-9]{1,15}$/;

/** A factory for the webhooks module with explicit options. */
export function createWebhooksModule(options: WebhooksModuleOptions = {}): FacilitatorModuleFactory {
  const random = options.random ?? Math.random;
  const randomBytes = options.randomBytes ?? ((size: number) => new Uint8Array(nodeRandomBytes(size)));
  const send: WebhookFetch = options.fetch ?? pinnedWebhookFetch;
  const defaultGrace = options.defaultGraceSeconds ?? 86_400;
  const targets = createWebhookTargetPolicy({ allowTargets: options.allowTargets, lookup: options.lookup });

  return (ctx) => {
    const ephemeralKey = options.secretKeys === undefined || options.secretKeys.length === 0;
    const secrets = createWebhookSecretBox(ephemeralKey ? [randomBytes(32)] : options.secretKeys!);
    const repository = createWebhookRepository({
      store: ctx.store,
      randomBytes,
      secrets,
      maxEndpointsPerProvider: options.maxEndpointsPerProvider,
    });
    const attempts = webhookAttemptsCounter(ctx.metrics.registry);
    const worker = createWebhookWorker({
      store: ctx.store,
      clock: ctx.clock,
      logger: ctx.logger,
      fetch: send,
      targets,
      secrets,
      random,
      retry: options.retry,
      timeoutMs: options.timeoutMs,
      leaseMs: options.leaseMs,
      concurrency: options.concurrency,
      fanOutBatchSize: options.fanOutBatchSize,
      pollIntervalMs: options.pollIntervalMs,
      retentionMs: options.retentionMs,
      onAttempt: (outcome: WebhookDeliveryOutcome) => attempts.inc({ outcome }),
    });
    const routes: WebhookRoutes = {
      repository,
      targets,
      auth: requireProvider(ctx),
      docs: webhookRouteDocs(),
      now: () => new Date(ctx.clock.now()),
      logger: ctx.logger,
      defaultGrace,
    };

    return {
      name: "webhooks",
      routes(app: Hono) {
        registerEndpointRoutes(app, routes);
        registerDeliveryRoutes(app, routes);
      },
      async start() {
        if (ephemeralKey) {
          ctx.logger.warn(
            "webhook secrets are sealed with a key of this process only; configure webhook secret keys to keep endpoints usable across restarts",
          );
        }
        // Plaintext secrets from before migration 0064, or sealed by a rotated-out key: seal them anew.
        const resealed = await repository.resealSecrets();
        if (resealed > 0) ctx.logger.info({ resealed }, "sealed stored webhook secrets with the current key");
        if (options.runWorker !== false) worker.start();
      },
      async stop() {
        await worker.stop();
      },
    };
  };
}

/** What the routes share: the repository, the target policy, the provider check, their docs and the clock. */
type WebhookRoutes = {
  repository: WebhookRepository;
  targets: WebhookTargetPolicy;
  auth: ReturnType<typeof requireProvider>;
  docs: ReturnType<typeof webhookRouteDocs>;
  now: () => Date;
  logger: FacilitatorContext["logger"];
  defaultGrace: number;
};

/** The attempts counter, shared by every facilitator on one metrics registry. */
function webhookAttemptsCounter(registry: FacilitatorContext["metrics"]["registry"]): Counter<"outcome"> {
  const metricName = "tollgate_webhook_attempts_total";
  return (
    (registry.getSingleMetric(metricName) as Counter<"outcome"> | undefined) ??
    new Counter({
      name: metricName,
      help: "Webhook delivery attempts by outcome (delivered, retry, dead)",
      labelNames: ["outcome"] as const,
      registers: [registry],
    })
  );
}

function webhookRouteDocs() {
  return {
    create: routeDoc({
      summary: "Register a webhook endpoint for the provider's events; its signing secret is shown once",
      request: CreateWebhookRequestSchema,
      response: CreateWebhookResponseSchema,
      status: 201,
      errors: [400, 413],
    }),
    list: routeDoc({ summary: "The provider's webhook endpoints", response: ListWebhooksResponseSchema }),
    remove: routeDoc({
      summary: "Delete one of the provider's webhook endpoints",
      response: DeleteWebhookResponseSchema,
      errors: [404],
    }),
    rotate: routeDoc({
      summary: "A new signing secret for an endpoint; the old one signs too for a grace period",
      request: RotateWebhookSecretRequestSchema,
      response: RotateWebhookSecretResponseSchema,
      errors: [400, 404, 413],
    }),
    deliveries: routeDoc({
      summary: "An endpoint's recent deliveries and their attempts",
      query: ListWebhookDeliveriesQuerySchema,
      response: ListWebhookDeliveriesResponseSchema,
      errors: [400, 404],
    }),
    retry: routeDoc({
      summary: "Queue a finished delivery to be sent again",
      response: RetryWebhookDeliveryResponseSchema,
      errors: [400, 404],
    }),
  };
}

/** `POST /webhooks`, `GET /webhooks`, `DELETE /webhooks/:id`, `POST /webhooks/:id/rotate-secret`. */
function registerEndpointRoutes(app: Hono, routes: WebhookRoutes): void {
  const { repository, docs, auth, now } = routes;
  app.post("/webhooks", docs.create, auth, async (c) => {
    const request = await readJsonBody(c, CreateWebhookRequestSchema);
    // Refused here with the reason, so a provider learns at once; deliveries check again.
    await routes.targets.check(request.url);
    const body: CreateWebhookResponse = await repository.create(c.get("provider").address, request, now());
    routes.logger.info(
      { provider: c.get("provider").address, webhook: body.id },
      "webhook endpoint registered",
    );
    return c.json(body, 201);
  });

  app.get("/webhooks", docs.list, auth, async (c) => {
    const body: ListWebhooksResponse = {
      webhooks: await repository.list(c.get("provider").address, now()),
    };
    return c.json(body);
  });

  app.delete("/webhooks/:id", docs.remove, auth, async (c) => {
    const id = endpointId(c.req.param("id"));
    await repository.remove(c.get("provider").address, id);
    const body: DeleteWebhookResponse = { id, deleted: true };
    return c.json(body);
  });

  app.post("/webhooks/:id/rotate-secret", docs.rotate, auth, async (c) => {
    const id = endpointId(c.req.param("id"));
    const request = parseWire(RotateWebhookSecretRequestSchema, await optionalJson(c), {
      what: "request body",
    });
    const body = await repository.rotateSecret(
      c.get("provider").address,
      id,
      request.graceSeconds ?? routes.defaultGrace,
      now(),
    );
    return c.json(body);
  });
}

/** `GET /webhooks/:id/deliveries` and `POST /webhooks/:id/deliveries/:deliveryId/retry`. */
function registerDeliveryRoutes(app: Hono, routes: WebhookRoutes): void {
  const { repository, docs, auth, now } = routes;
  app.get("/webhooks/:id/deliveries", docs.deliveries, auth, async (c) => {
    const id = endpointId(c.req.param("id"));
    const query = parseWire(ListWebhookDeliveriesQuerySchema, c.req.query(), { what: "query" });
    const body: ListWebhookDeliveriesResponse = {
      deliveries: await repository.listDeliveries(c.get("provider").address, id, query),
    };
    return c.json(body);
  });

  app.post("/webhooks/:id/deliveries/:deliveryId/retry", docs.retry, auth, async (c) => {
    const id = endpointId(c.req.param("id"));
    const deliveryId = c.req.param("deliveryId");
    if (!DELIVERY_ID.test(deliveryId)) {
      throw new TollgateError("NotFound", "no delivery with that id for this endpoint");
    }
    const delivery = await repository.retryDelivery(c.get("provider").address, id, deliveryId, now());
    const body: RetryWebhookDeliveryResponse = { delivery };
    return c.json(body);
  });
}

/** The webhooks module with its defaults (listed in modules.ts). */
export const webhooksModule: FacilitatorModuleFactory = createWebhooksModule();

function endpointId(id: string): string {
  // A malformed id names no endpoint: 404 like an unknown one, never a 500 from the store.
  if (!ENDPOINT_ID.test(id)) throw new TollgateError("NotFound", "no webhook endpoint with that id");
  return id;
}

/** A JSON body that may be absent (`{}` then). */
async function optionalJson(c: Context): Promise<unknown> {
  const text = await c.req.text();
  if (text.trim() === "") return {};
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "request body is not valid JSON", { cause });
  }
}
