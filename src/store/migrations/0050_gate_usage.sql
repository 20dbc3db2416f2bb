-- Metered usage counted by gates (DESIGN.md §5, docs/gate.md "Metering"), for gate instances that share
-- one database (createPostgresUsageLedger). A ledger is one API's counts (or several APIs sharing a plan's
-- included units); each subscription has one row for its current cycle; charges past the included units
-- wait in `pending` until a flush claims them into a batch of one item per subscription, sent to the
-- facilitator's POST /usage and resolved when it reports the item settled or failed on chain.

CREATE TABLE gate_usage_ledgers (
  name text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
  -- Random and fixed at creation: the refs sent to the facilitator embed it, so two ledgers (two
  -- databases, or two names) never produce the same ref for the same provider.
  ledger_id text NOT NULL CHECK (ledger_id ~ '^[0-9a-f]{32}$'),
  -- Charged and not yet settled on chain, all subscriptions together: the gate's exposure.
  unsettled uint256 NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE gate_usage_cycles (
  ledger text NOT NULL REFERENCES gate_usage_ledgers (name),
  subscription_id uint256 NOT NULL,
  -- The chain's current period of the subscription as last seen, unix seconds.
  period_start bigint NOT NULL,
  period_end bigint NOT NULL,
  units bigint NOT NULL DEFAULT 0 CHECK (units >= 0),
  -- Charged past the included units in this cycle.
  overage uint256 NOT NULL DEFAULT 0,
  -- Charged and not yet claimed into a batch (may span a renewal).
  pending uint256 NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (ledger, subscription_id)
);

CREATE INDEX gate_usage_cycles_pending_idx ON gate_usage_cycles (ledger, subscription_id) WHERE pending > 0;

CREATE TABLE gate_usage_batches (
  id bigserial PRIMARY KEY,
  ledger text NOT NULL REFERENCES gate_usage_ledgers (name),
  status text NOT NULL DEFAULT 'claimed' CHECK (status IN ('claimed', 'sent')),
  -- Gate clock, ms: a batch claimed long ago and never marked sent is sent again (same refs).
  claimed_at_ms bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX gate_usage_batches_claimed_idx ON gate_usage_batches (ledger, claimed_at_ms) WHERE status = 'claimed';

CREATE TABLE gate_usage_items (
  -- The facilitator's idempotency key: tg + 40 hex digits, unique across ledgers.
  ref text PRIMARY KEY CHECK (ref ~ '^tg[0-9a-f]{40}$'),
  ledger text NOT NULL REFERENCES gate_usage_ledgers (name),
  batch_id bigint NOT NULL REFERENCES gate_usage_batches (id),
  subscription_id uint256 NOT NULL,
  amount uint256 NOT NULL CHECK (amount > 0),
  status text NOT NULL DEFAULT 'claimed' CHECK (status IN ('claimed', 'sent', 'settled', 'failed')),
  sent_at_ms bigint,
  resolved_at timestamptz
);

CREATE INDEX gate_usage_items_batch_idx ON gate_usage_items (batch_id);
CREATE INDEX gate_usage_items_open_idx ON gate_usage_items (ledger, sent_at_ms) WHERE status = 'sent';
