/**
 * Webhook endpoints and their deliveries in the store, always scoped to one provider: a provider can
 * neither see nor touch another provider's endpoints, and an id it does not own is simply not found.
 */
import { z } from "zod";
import { base64UrlEncode } from "../../protocol/base64.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { WebhookEventTypeSchema } from "../../protocol/webhook.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable, Store } from "../../store/store.ts";
import type {
  CreateWebhookRequest,
  CreateWebhookResponse,
  ListWebhookDeliveriesQuery,
  RotateWebhookSecretResponse,
  WebhookDelivery,
  WebhookEndpoint,
} from "./webhookApi.ts";
import { WebhookDeliveryStatusSchema } from "./webhookApi.ts";
import type { WebhookSecretBox } from "./webhookSecretBox.ts";

/** Built once: a zod object schema compiles its parser on first use. */
const DeliveryStatusRowSchema = z.object({ id: SafeIntColumnSchema, status: z.string() });

export type WebhookRepositoryOptions = {
  store: Store;
  /** Random bytes for endpoint ids and secrets. */
  randomBytes: (size: number) => Uint8Array;
  /** Seals secrets before they are written: the store never holds one in plain text. */
  secrets: WebhookSecretBox;
  /** Endpoints one provider may register (default 20). */
  maxEndpointsPerProvider?: number | undefined;
  /** Attempts shown per delivery (default 10, most recent first). */
  historyLength?: number | undefined;
};

export type WebhookRepository = ReturnType<typeof createWebhookRepository>;

const EndpointRowSchema = z.object({
  id: z.string(),
  url: z.string(),
  events: z.array(WebhookEventTypeSchema).nullable(),
  description: z.string().nullable(),
  created_at: TimestampColumnSchema,
  previous_secret_expires_at: TimestampColumnSchema.nullable(),
});
type EndpointRow = z.infer<typeof EndpointRowSchema>;

const SecretRowSchema = z.object({
  id: z.string(),
  secret: z.string(),
  previous_secret: z.string().nullable(),
});

const DeliveryRowSchema = z.object({
  id: SafeIntColumnSchema,
  event_id: SafeIntColumnSchema,
  event_type: z.string(),
  status: WebhookDeliveryStatusSchema,
  attempts: z.number().int(),
  next_attempt_at: TimestampColumnSchema,
  delivered_at: TimestampColumnSchema.nullable(),
  created_at: TimestampColumnSchema,
});

const AttemptRowSchema = z.object({
  delivery_id: SafeIntColumnSchema,
  attempted_at: TimestampColumnSchema,
  status_code: z.number().int().nullable(),
  error: z.string().nullable(),
  duration_ms: z.number().int().nullable(),
});

/** The id a receiver de-duplicates on: stable across retries of one event to any endpoint. */
export function webhookEventId(eventId: number | bigint): string {
  return `evt_${eventId}`;
}

const DELIVERY_COLUMNS = `d.id, d.event_id, e.type AS event_type, d.status, d.attempts, d.next_attempt_at,
  d.delivered_at, d.created_at`;

export function createWebhookRepository(options: WebhookRepositoryOptions) {
  const ctx: RepositoryContext = {
    store: options.store,
    randomBytes: options.randomBytes,
    secrets: options.secrets,
    maxEndpoints: options.maxEndpointsPerProvider ?? 20,
    historyLength: options.historyLength ?? 10,
  };
  return { ...endpointRepository(ctx), ...secretRepository(ctx), ...deliveryRepository(ctx) };
}

/** What the repository's parts share: the store, the secret box, random bytes and the limits. */
type RepositoryContext = {
  store: Store;
  randomBytes: (size: number) => Uint8Array;
  secrets: WebhookSecretBox;
  maxEndpoints: number;
  historyLength: number;
};

/** A provider's endpoints: register, list, delete, rotate the secret. */
function endpointRepository(ctx: RepositoryContext) {
  const { store } = ctx;
  return {
    /** Registers an endpoint; the reply holds its secret, which is never shown again. */
    async create(provider: string, request: CreateWebhookRequest, now: Date): Promise<CreateWebhookResponse> {
      const owner = provider.toLowerCase();
      const id = `we_${base64UrlEncode(ctx.randomBytes(12))}`;
      const secret = newSecret(ctx);
      const row = await store.transaction((tx) => insertEndpoint(ctx, tx, { id, owner, request, secret }));
      if (row === undefined) throw new TollgateError("Internal", "webhook endpoint insert returned nothing");
      return { ...toEndpoint(row, now), secret };
    },

    async list(provider: string, now: Date): Promise<WebhookEndpoint[]> {
      const rows = await queryParsed(
        store,
        EndpointRowSchema,
        `SELECT id, url, events, description, created_at, previous_secret_expires_at
         FROM webhook_endpoints WHERE provider = $1 ORDER BY created_at, id`,
        [provider.toLowerCase()],
      );
      return rows.map((row) => toEndpoint(row, now));
    },

    /** Deletes an endpoint and its queued and past deliveries; nothing more is sent to it. */
    async remove(provider: string, id: string): Promise<void> {
      const deleted = await store.query(
        "DELETE FROM webhook_endpoints WHERE id = $1 AND provider = $2 RETURNING id",
        [id, provider.toLowerCase()],
      );
      if (deleted.length === 0) throw new TollgateError("NotFound", "no webhook endpoint with that id");
    },

    /**
     * Issues a new secret. The old one keeps signing deliveries (as a second `v1`) for `graceSeconds`,
     * so receivers can switch without refusing anything in between.
     */
    async rotateSecret(
      provider: string,
      id: string,
      graceSeconds: number,
      now: Date,
    ): Promise<RotateWebhookSecretResponse> {
      const secret = newSecret(ctx);
      const until = graceSeconds > 0 ? new Date(now.getTime() + graceSeconds * 1000) : null;
      const rows = await store.query(
        `UPDATE webhook_endpoints SET previous_secret = CASE WHEN $4::timestamptz IS NULL THEN NULL ELSE secret END,
           previous_secret_expires_at = $4, secret = $3, updated_at = $5
         WHERE id = $1 AND provider = $2 RETURNING id`,
        [id, provider.toLowerCase(), ctx.secrets.seal(secret, id), until, now],
      );
      if (rows.length === 0) throw new TollgateError("NotFound", "no webhook endpoint with that id");
      return { id, secret, previousSecretExpiresAt: until?.toISOString() ?? null };
    },
  };
}

/** The secrets at rest, sealed anew after a key rotation or an upgrade. */
function secretRepository(ctx: RepositoryContext) {
  return {
    /**
     * Seals again every stored secret that is in plain text (rows written before migration 0064) or
     * sealed by a key other than the sealing one (after a key rotation). Returns the rows changed.
     * A secret sealed by a key that is not configured at all is left as it is (and logged by the worker
     * when it cannot sign with it).
     */
    async resealSecrets(): Promise<number> {
      const rows = await queryParsed(
        ctx.store,
        SecretRowSchema,
        "SELECT id, secret, previous_secret FROM webhook_endpoints ORDER BY id",
      );
      let changed = 0;
      for (const row of rows) changed += await resealRow(ctx, row);
      await validateSealedConstraint(ctx.store);
      if (changed > 0) {
        // The plaintext still sits in the dead row versions the updates left; reclaim them now rather
        // than whenever autovacuum comes by. Best effort: it needs the table's owner on PostgreSQL.
        await ctx.store.exec("VACUUM webhook_endpoints").catch(() => {});
      }
      return changed;
    },
  };
}

/** An endpoint's deliveries with their recent attempts, and the retry of a finished one. */
function deliveryRepository(ctx: RepositoryContext) {
  const { store } = ctx;
  return {
    async listDeliveries(
      provider: string,
      endpointId: string,
      query: ListWebhookDeliveriesQuery,
    ): Promise<WebhookDelivery[]> {
      await ownedEndpoint(store, provider, endpointId);
      const rows = await queryParsed(
        store,
        DeliveryRowSchema,
        `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
         WHERE d.endpoint_id = $1 AND ($2::text IS NULL OR d.status = $2)
           AND ($3::bigint IS NULL OR d.id < $3)
         ORDER BY d.id DESC LIMIT $4`,
        [endpointId, query.status ?? null, query.before ?? null, query.limit],
      );
      return deliveriesWithHistory(ctx, rows);
    },

    /**
     * Requeues a dead letter (or re-sends a delivered event) for an attempt now, with a fresh retry
     * budget. A delivery that is still queued or being sent is left alone (400).
     */
    async retryDelivery(
      provider: string,
      endpointId: string,
      deliveryId: string,
      now: Date,
    ): Promise<WebhookDelivery> {
      await ownedEndpoint(store, provider, endpointId);
      const id = await requeueFinishedDelivery(store, endpointId, deliveryId, now);
      const [delivery] = await deliveriesWithHistory(
        ctx,
        await queryParsed(
          store,
          DeliveryRowSchema,
          `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d JOIN events e ON e.id = d.event_id WHERE d.id = $1`,
          [id],
        ),
      );
      if (delivery === undefined) throw new TollgateError("NotFound", "the delivery was deleted");
      return delivery;
    },
  };
}

function newSecret(ctx: RepositoryContext): string {
  return `whsec_${base64UrlEncode(ctx.randomBytes(24))}`;
}

/** Inserts an endpoint unless its provider already has the most it may register. */
async function insertEndpoint(
  ctx: RepositoryContext,
  tx: Queryable,
  endpoint: { id: string; owner: string; request: CreateWebhookRequest; secret: string },
): Promise<EndpointRow | undefined> {
  const { id, owner, request, secret } = endpoint;
  // Serialise registrations of one provider so the limit below holds under concurrency.
  await tx.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`webhooks:${owner}`]);
  const count = await tx.query("SELECT 1 FROM webhook_endpoints WHERE provider = $1", [owner]);
  if (count.length >= ctx.maxEndpoints) {
    throw new TollgateError(
      "InvalidRequest",
      `a provider may register ${ctx.maxEndpoints} webhook endpoints; delete one first`,
      { details: { reason: "too_many_endpoints", maxEndpoints: ctx.maxEndpoints } },
    );
  }
  return queryOneParsed(
    tx,
    EndpointRowSchema,
    // created_at is the database's time, like events.created_at: fan-out compares the two to
    // send an endpoint only the events that happened after it was registered.
    `INSERT INTO webhook_endpoints (id, provider, url, events, description, secret)
     VALUES ($1, $2, $3, $4, $5, $6)
     RETURNING id, url, events, description, created_at, previous_secret_expires_at`,
    [
      id,
      owner,
      request.url,
      request.events ?? null,
      request.description ?? null,
      ctx.secrets.seal(secret, id),
    ],
  );
}

function toEndpoint(row: EndpointRow, now: Date): WebhookEndpoint {
  const graceUntil = row.previous_secret_expires_at;
  return {
    id: row.id,
    url: row.url,
    events: row.events,
    description: row.description,
    createdAt: row.created_at.toISOString(),
    previousSecretExpiresAt: graceUntil !== null && graceUntil > now ? graceUntil.toISOString() : null,
  };
}

/** Seals one endpoint's secrets anew if either needs it and a configured key opens both; the rows changed. */
async function resealRow(ctx: RepositoryContext, row: z.infer<typeof SecretRowSchema>): Promise<number> {
  const stale = [row.secret, row.previous_secret].some(
    (value) => value !== null && ctx.secrets.needsReseal(value),
  );
  if (!stale) return 0;
  let secret: string;
  let previous: string | null;
  try {
    secret = ctx.secrets.open(row.secret, row.id);
    previous = row.previous_secret === null ? null : ctx.secrets.open(row.previous_secret, row.id);
  } catch {
    return 0;
  }
  // Compare-and-set on the values read: a rotation in between wins and is not overwritten.
  const updated = await ctx.store.query(
    `UPDATE webhook_endpoints SET secret = $2, previous_secret = $3, updated_at = now()
     WHERE id = $1 AND secret = $4 AND previous_secret IS NOT DISTINCT FROM $5 RETURNING id`,
    [
      row.id,
      ctx.secrets.seal(secret, row.id),
      previous === null ? null : ctx.secrets.seal(previous, row.id),
      row.secret,
      row.previous_secret,
    ],
  );
  return updated.length;
}

/** Every row is sealed now: make migration 0064's constraint hold for old rows too (once). */
async function validateSealedConstraint(store: Store): Promise<void> {
  const [constraint] = await store.query<{ convalidated: boolean }>(
    `SELECT convalidated FROM pg_constraint
     WHERE conname = 'webhook_endpoints_secret_sealed' AND conrelid = 'webhook_endpoints'::regclass`,
  );
  if (constraint?.convalidated === false) {
    // A row whose key is not configured keeps its old value and the constraint stays NOT VALID.
    await store
      .exec("ALTER TABLE webhook_endpoints VALIDATE CONSTRAINT webhook_endpoints_secret_sealed")
      .catch(() => {});
  }
}

/** The endpoint if `provider` owns it; a 404 otherwise (another provider's id is not revealed). */
async function ownedEndpoint(db: Queryable, provider: string, id: string): Promise<EndpointRow> {
  const row = await queryOneParsed(
    db,
    EndpointRowSchema,
    `SELECT id, url, events, description, created_at, previous_secret_expires_at
     FROM webhook_endpoints WHERE id = $1 AND provider = $2`,
    [id, provider.toLowerCase()],
  );
  if (row === undefined) throw new TollgateError("NotFound", "no webhook endpoint with that id");
  return row;
}

/**
 * Puts a dead or delivered delivery of the endpoint back in the queue, due `now` with no attempts;
 * returns its id. 404 for no such delivery, 400 for one still queued or being sent.
 */
async function requeueFinishedDelivery(
  store: Store,
  endpointId: string,
  deliveryId: string,
  now: Date,
): Promise<number> {
  const rows = await queryParsed(
    store,
    DeliveryStatusRowSchema,
    "SELECT id, status FROM webhook_deliveries WHERE id = $1 AND endpoint_id = $2",
    [deliveryId, endpointId],
  );
  const current = rows[0];
  if (current === undefined)
    throw new TollgateError("NotFound", "no delivery with that id for this endpoint");
  const requeued = await store.query(
    `UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = $2,
       delivered_at = NULL, updated_at = now()
     WHERE id = $1 AND status IN ('dead', 'delivered') RETURNING id`,
    [current.id, now],
  );
  if (requeued.length === 0) {
    throw new TollgateError("InvalidRequest", "the delivery is already queued; it will be tried again", {
      details: { reason: "already_queued", status: current.status },
    });
  }
  return current.id;
}

async function deliveriesWithHistory(
  ctx: RepositoryContext,
  rows: z.infer<typeof DeliveryRowSchema>[],
): Promise<WebhookDelivery[]> {
  if (rows.length === 0) return [];
  const attempts = await queryParsed(
    ctx.store,
    AttemptRowSchema,
    `SELECT delivery_id, attempted_at, status_code, error, duration_ms FROM (
       SELECT a.*, row_number() OVER (PARTITION BY delivery_id ORDER BY id DESC) AS rank
       FROM webhook_attempts a WHERE delivery_id = ANY($1::bigint[])) ranked
     WHERE rank <= $2 ORDER BY delivery_id, rank`,
    [rows.map((r) => r.id), ctx.historyLength],
  );
  return rows.map((row) => ({
    id: String(row.id),
    eventId: webhookEventId(row.event_id),
    eventType: row.event_type,
    status: row.status,
    attempts: row.attempts,
    nextAttemptAt: row.status === "pending" ? row.next_attempt_at.toISOString() : null,
    deliveredAt: row.delivered_at?.toISOString() ?? null,
    createdAt: row.created_at.toISOString(),
    history: attempts
      .filter((a) => a.delivery_id === row.id)
      .map((a) => ({
        at: a.attempted_at.toISOString(),
        statusCode: a.status_code,
        error: a.error,
        durationMs: a.duration_ms,
      })),
  }));
}
