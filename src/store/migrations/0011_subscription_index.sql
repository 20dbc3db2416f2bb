-- The facilitator's index of SubscriptionManager state (DESIGN.md §3, §4), built from its events by the
-- subscription indexer, plus what the relay endpoints and the renewal keeper need.
--
-- Chain times (period ends, creation) are unix seconds of the *chain* (a devnet's clock can be moved
-- ahead of the wall clock), so they are plain integers, never timestamptz.

-- How far each log follower has read, per chain and contract. Updated in the same transaction as the
-- rows its logs produced, so a crash never skips or half-applies a chunk.
CREATE TABLE chain_cursors (
  name text PRIMARY KEY,
  block_number numeric(78, 0) NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Every applied log, so applying a log twice (a retried chunk, a second facilitator instance) is a no-op.
CREATE TABLE indexed_logs (
  chain_id integer NOT NULL,
  tx_hash text NOT NULL CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
  log_index integer NOT NULL,
  block_number numeric(78, 0) NOT NULL,
  PRIMARY KEY (chain_id, tx_hash, log_index)
);

CREATE TABLE plans (
  chain_id integer NOT NULL,
  manager text NOT NULL CHECK (manager ~ '^0x[0-9a-f]{40}$'),
  plan_id numeric(78, 0) NOT NULL,
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  token text NOT NULL CHECK (token ~ '^0x[0-9a-f]{40}$'),
  amount uint256 NOT NULL,
  interval_seconds bigint NOT NULL CHECK (interval_seconds > 0),
  included_units numeric(78, 0) NOT NULL,
  overage_unit_price uint256 NOT NULL,
  deprecated boolean NOT NULL DEFAULT false,
  successor_plan_id numeric(78, 0),
  created_tx text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (chain_id, manager, plan_id)
);

CREATE INDEX plans_provider_idx ON plans (provider);

CREATE TABLE subscriptions (
  chain_id integer NOT NULL,
  manager text NOT NULL CHECK (manager ~ '^0x[0-9a-f]{40}$'),
  subscription_id numeric(78, 0) NOT NULL,
  plan_id numeric(78, 0) NOT NULL,
  subscriber text NOT NULL CHECK (subscriber ~ '^0x[0-9a-f]{40}$'),
  -- The plan's provider (payee), copied here so events and usage can be routed without a join.
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  status text NOT NULL CHECK (status IN ('Active', 'Paused', 'Cancelled', 'PastDue')),
  created_at_chain bigint NOT NULL,
  period_start bigint NOT NULL,
  -- End of the paid period, which is also when the next charge falls due.
  current_period_end bigint NOT NULL,
  paused_remaining bigint NOT NULL DEFAULT 0,
  max_overage uint256 NOT NULL,
  overage_used uint256 NOT NULL DEFAULT 0,
  created_tx text,
  -- The block of the last log applied to this row.
  last_block numeric(78, 0) NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (chain_id, manager, subscription_id)
);

-- The keeper's question: which renewable subscriptions are due by chain time T?
CREATE INDEX subscriptions_due_idx ON subscriptions (chain_id, manager, current_period_end)
  WHERE status IN ('Active', 'PastDue');
CREATE INDEX subscriptions_subscriber_idx ON subscriptions (subscriber);
CREATE INDEX subscriptions_provider_idx ON subscriptions (provider);

-- Relayed subscriber intents (POST /subscriptions, /subscriptions/:id/{pause|resume|cancel|overage}),
-- keyed by a digest of the signed request: a retried request returns the first one's result instead of
-- failing on the intent nonce it already used.
CREATE TABLE subscription_relays (
  digest text PRIMARY KEY CHECK (digest ~ '^0x[0-9a-f]{64}$'),
  kind text NOT NULL,
  subscriber text NOT NULL CHECK (subscriber ~ '^0x[0-9a-f]{40}$'),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'done')),
  tx_hash text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
  result jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Renewal keeper: failed collections of one period are retried with a back-off in chain time.
CREATE TABLE renewal_attempts (
  chain_id integer NOT NULL,
  manager text NOT NULL,
  subscription_id numeric(78, 0) NOT NULL,
  -- The period end these attempts are for; a new period starts the count again.
  period_end bigint NOT NULL,
  failures integer NOT NULL DEFAULT 0,
  next_attempt_at bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (chain_id, manager, subscription_id)
);

-- Leases that let one facilitator instance at a time run a singleton worker (the keeper).
CREATE TABLE worker_leases (
  name text PRIMARY KEY,
  holder text NOT NULL,
  lease_until timestamptz NOT NULL
);
