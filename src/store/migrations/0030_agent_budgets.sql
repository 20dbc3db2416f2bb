-- Agent budgets (DESIGN.md §7): per-agent spending limits and the reserve/commit/release ledger.
--
-- Invariants kept by src/agent/budget/createBudgetLedger.ts, which takes the agent's row lock
-- (`agent_budgets … FOR UPDATE`) before every read-check-write of the rows below:
-- - A spend is a row of `agent_spends`; it counts against the limits while `reserved` and unexpired
--   (its `reserved` amount) and once `committed` (its `committed` amount, at most `reserved`).
-- - `agent_spend_totals` is the running sum of committed amounts per (agent, provider, kind), updated
--   in the same transaction as the commit, so checks need not scan an agent's whole history.
-- - The rolling day places a spend at `reserved_at`, the moment it was authorized.
-- Times come from the ledger's injected clock, never from now(), so tests can move them.

CREATE TABLE agent_budgets (
  agent text PRIMARY KEY CHECK (agent ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
  -- NULL means "no such limit".
  total_limit uint256,
  daily_limit uint256,
  per_call_limit uint256,
  max_subscription_commitment uint256,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent_provider_limits (
  agent text NOT NULL REFERENCES agent_budgets (agent) ON DELETE CASCADE,
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  limit_amount uint256 NOT NULL,
  PRIMARY KEY (agent, provider)
);

CREATE TABLE agent_spends (
  id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
  agent text NOT NULL REFERENCES agent_budgets (agent),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  kind text NOT NULL CHECK (kind IN ('one-time', 'subscription', 'metered')),
  -- What the spend pays for: a memo, a subscription id or plan, a usage reference.
  ref text CHECK (length(ref) <= 512),
  reserved uint256 NOT NULL CHECK (reserved > 0),
  committed uint256,
  status text NOT NULL DEFAULT 'reserved' CHECK (status IN ('reserved', 'committed', 'released')),
  reserved_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  settled_at timestamptz,
  -- Committed after the reservation had expired (the money moved anyway, so the ledger records it).
  late boolean NOT NULL DEFAULT false,
  CHECK ((status = 'committed') = (committed IS NOT NULL)),
  CHECK (committed IS NULL OR committed <= reserved),
  CHECK (expires_at > reserved_at)
);

CREATE INDEX agent_spends_window_idx ON agent_spends (agent, reserved_at);
CREATE INDEX agent_spends_open_idx ON agent_spends (agent) WHERE status = 'reserved';

CREATE TABLE agent_spend_totals (
  agent text NOT NULL REFERENCES agent_budgets (agent),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  kind text NOT NULL CHECK (kind IN ('one-time', 'subscription', 'metered')),
  spent uint256 NOT NULL DEFAULT 0,
  PRIMARY KEY (agent, provider, kind)
);

-- Subscriptions an agent holds: while `active`, `amount` (the price of one plan period) counts
-- against the agent's maximum subscription commitment. One row per subscription reference, so a
-- renewal replaces the commitment instead of adding to it.
CREATE TABLE agent_subscriptions (
  agent text NOT NULL REFERENCES agent_budgets (agent),
  ref text NOT NULL CHECK (length(ref) BETWEEN 1 AND 512),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  amount uint256 NOT NULL,
  active boolean NOT NULL DEFAULT true,
  started_at timestamptz NOT NULL,
  ended_at timestamptz,
  PRIMARY KEY (agent, ref)
);
