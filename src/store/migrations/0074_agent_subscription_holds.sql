-- Agents' subscriptions as state, and what each one may still take (docs/budgets.md, issue 12).
--
-- `agent_holds`: a standing hold on an agent's budget for what a subscription can still pull on chain
-- (this period's overage cap, the next renewal and its cap). Unlike a reservation it does not expire:
-- the chain can take the money until the subscription ends. `held` counts against the total, daily and
-- per-provider limits as reserved; `charged` is everything recorded as spent under this ref, so a
-- watcher can record "the chain has now pulled X in all" idempotently (only X − charged is new).
-- Written by src/agent/budget/createBudgetLedger.ts under the agent's row lock.
CREATE TABLE agent_holds (
  agent text NOT NULL REFERENCES agent_budgets (agent),
  ref text NOT NULL CHECK (length(ref) BETWEEN 1 AND 512),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  held uint256 NOT NULL DEFAULT 0,
  charged uint256 NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (agent, ref)
);

-- Subscriptions held by a wallet, claimed before subscribing: at most one live row per (subscriber,
-- manager, plan), so a second process, a restart or a second agent on the same wallet reuses the
-- subscription instead of taking out another. A `claimed` row without a subscription id is a subscribe
-- in flight (or one that crashed: reconciled from the chain once the claim is stale).
CREATE TABLE agent_plan_subscriptions (
  id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
  subscriber text NOT NULL CHECK (subscriber ~ '^0x[0-9a-f]{40}$'),
  manager text NOT NULL CHECK (manager ~ '^0x[0-9a-f]{40}$'),
  plan_id text NOT NULL CHECK (plan_id ~ '^[0-9]{1,78}$'),
  agent text NOT NULL REFERENCES agent_budgets (agent),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  subscription_id text CHECK (subscription_id ~ '^[0-9]{1,78}$'),
  status text NOT NULL CHECK (status IN ('claimed', 'active', 'paused', 'ended')),
  -- The block the subscription was created in (or before): where its events are read from.
  from_block uint256 NOT NULL DEFAULT 0,
  -- What the ledger recorded for the subscription outside its hold (the first period, committed from a
  -- reservation): the watcher charges the hold with what the chain pulled beyond it.
  recorded_first uint256 NOT NULL DEFAULT 0,
  claimed_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  note text CHECK (length(note) <= 512),
  CHECK (status = 'claimed' OR status = 'ended' OR subscription_id IS NOT NULL)
);

CREATE UNIQUE INDEX agent_plan_subscriptions_live_idx
  ON agent_plan_subscriptions (subscriber, manager, plan_id)
  WHERE status IN ('claimed', 'active', 'paused');
CREATE INDEX agent_plan_subscriptions_agent_idx ON agent_plan_subscriptions (agent, status);
