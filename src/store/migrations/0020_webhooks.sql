-- Webhooks (DESIGN.md §4): provider endpoints, a durable outbox over the `events` log, and the history
-- of delivery attempts.
--
-- Reading the event log without skipping: `events.id` comes from a sequence, and ids are taken when a
-- row is inserted, not when its transaction commits, so a reader that saw id 11 may later see id 10
-- appear. Each event therefore also records the id of the transaction that wrote it (`tx`). The outbox
-- only takes events whose transaction is older than every transaction still running
-- (`tx < pg_snapshot_xmin(pg_current_snapshot())`): that set can no longer grow, so a cursor over
-- (tx, id) never passes an event that commits later.
ALTER TABLE events ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX events_tx_idx ON events (tx, id);

-- Endpoints registered by providers. The secret signs deliveries; while a rotation is in its grace
-- period, deliveries are signed with the previous secret too.
CREATE TABLE webhook_endpoints (
  id text PRIMARY KEY CHECK (id ~ '^we_[A-Za-z0-9_-]{16,64}$'),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  url text NOT NULL CHECK (length(url) <= 2048),
  -- NULL: every event type.
  events text[],
  description text CHECK (length(description) <= 500),
  secret text NOT NULL,
  previous_secret text,
  previous_secret_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX webhook_endpoints_provider_idx ON webhook_endpoints (provider, created_at);

-- How far the outbox has read the event log (one row per reader; the outbox is `outbox`). Fan-out
-- locks this row, so instances sharing a database take turns and never enqueue an event twice.
CREATE TABLE webhook_cursors (
  name text PRIMARY KEY,
  tx xid8 NOT NULL,
  event_id bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO webhook_cursors (name, tx, event_id) VALUES ('outbox', '0', 0);

-- One event to one endpoint. `attempts` counts tries since the delivery was (re)queued and drives the
-- backoff; `dead` is the dead-letter state a provider may requeue by hand. A claimed delivery is
-- `sending` under a lease: if its worker dies, the lease expires and another worker sends it again
-- (at least once).
CREATE TABLE webhook_deliveries (
  id bigserial PRIMARY KEY,
  endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
  event_id bigint NOT NULL REFERENCES events (id),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'delivered', 'dead')),
  attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt_at timestamptz NOT NULL,
  lease_token text,
  lease_expires_at timestamptz,
  last_attempt_at timestamptz,
  last_status_code integer,
  last_error text,
  delivered_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (endpoint_id, event_id),
  CHECK ((status = 'sending') = (lease_token IS NOT NULL))
);

-- The worker's queue: small, since delivered and dead rows leave it.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, id)
  WHERE status = 'pending';
CREATE INDEX webhook_deliveries_lease_idx ON webhook_deliveries (lease_expires_at)
  WHERE status = 'sending';
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, id);

-- Every HTTP attempt, for `GET /webhooks/:id/deliveries`.
CREATE TABLE webhook_attempts (
  id bigserial PRIMARY KEY,
  delivery_id bigint NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
  attempted_at timestamptz NOT NULL,
  -- NULL when no HTTP response came back (refused connection, timeout).
  status_code integer,
  error text,
  duration_ms integer
);

CREATE INDEX webhook_attempts_delivery_idx ON webhook_attempts (delivery_id, id);
