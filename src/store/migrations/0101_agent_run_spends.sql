-- What each agent run spent, call by call (src/facilitator/dashboard/agent/runSpendRecords.ts): the
-- spend events paid tools emit (src/agent/spendReport.ts), kept so the dashboard can show spend over
-- time by tool, seller and mode, the policy's reasons, and the latest run's spend report after the run
-- has ended. Amounts in the token's smallest unit; `offer` is the gate's offer with amounts as strings.
CREATE TABLE agent_runs (
  run_id text PRIMARY KEY CHECK (length(run_id) BETWEEN 1 AND 128),
  agent text NOT NULL CHECK (agent ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
  started_at timestamptz NOT NULL,
  finished_at timestamptz
);

CREATE INDEX agent_runs_agent_idx ON agent_runs (agent, started_at DESC);

CREATE TABLE agent_run_spends (
  run_id text NOT NULL REFERENCES agent_runs (run_id) ON DELETE CASCADE,
  seq integer NOT NULL CHECK (seq >= 0),
  agent text NOT NULL,
  at timestamptz NOT NULL,
  tool text NOT NULL CHECK (length(tool) BETWEEN 1 AND 256),
  provider text NOT NULL CHECK (length(provider) <= 256),
  mode text NOT NULL CHECK (mode IN ('one-time', 'subscription', 'metered', 'free')),
  amount uint256 NOT NULL,
  ok boolean NOT NULL,
  reason text CHECK (length(reason) <= 2000),
  error text CHECK (length(error) <= 2000),
  offer jsonb,
  transaction text CHECK (length(transaction) <= 100),
  subscription_id text CHECK (length(subscription_id) <= 100),
  PRIMARY KEY (run_id, seq)
);

CREATE INDEX agent_run_spends_agent_idx ON agent_run_spends (agent, at);
