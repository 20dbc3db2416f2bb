-- The policy's learned demand (src/agent/policy/createDemandHistory.ts, docs/policy.md "Learning"):
-- per agent, provider and plan, the decayed calls and decayed seconds observed as of `at_ms`
-- (src/agent/policy/demandEstimate.ts), so the running forecast survives a restart and is shared by
-- the processes of one agent. `one_time_price` is the seller's one-time price last offered beside the
-- plan: what the calls would cost without the subscription, which decides whether it is kept.
-- Rows are updated under a row lock (`FOR UPDATE`), so concurrent calls all count.
CREATE TABLE agent_call_demand (
  agent text NOT NULL CHECK (agent ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  -- '' when the calls are not to a plan.
  plan_id text NOT NULL CHECK (plan_id ~ '^(|0|[1-9][0-9]{0,77})$'),
  calls double precision NOT NULL CHECK (calls >= 0),
  exposure double precision NOT NULL CHECK (exposure >= 0),
  at_ms bigint NOT NULL,
  -- The first call recorded: the planner's forecast (the prior) loses weight from then on.
  since_ms bigint NOT NULL,
  one_time_price uint256,
  PRIMARY KEY (agent, provider, plan_id)
);

-- Subscriptions the policy cancelled because the running forecast no longer justified a renewal. A
-- row is claimed before the cancel is sent (one claim per subscriber and subscription), so two
-- processes never both cancel, and the reason is kept for the report. A claim whose cancel failed is
-- deleted, so a later check may try again.
CREATE TABLE agent_subscription_cancels (
  subscriber text NOT NULL CHECK (subscriber ~ '^0x[0-9a-f]{40}$'),
  subscription_id text NOT NULL CHECK (subscription_id ~ '^(0|[1-9][0-9]{0,77})$'),
  agent text NOT NULL,
  reason text NOT NULL CHECK (length(reason) <= 2000),
  status text NOT NULL CHECK (status IN ('claimed', 'cancelled')),
  claimed_at timestamptz NOT NULL,
  cancelled_at timestamptz,
  PRIMARY KEY (subscriber, subscription_id)
);
