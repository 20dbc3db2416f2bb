-- Gates report a metered call refused at a subscription's overage cap (POST /usage/exhausted,
-- docs/gate.md "Metering"): the facilitator emits `allowance.exhausted` once per subscription per cycle
-- (the subscription's period start as indexed), however many refused calls are reported. A row here is
-- that "once": the event is recorded in the same transaction as the row that first claims the cycle.

CREATE TABLE usage_exhaustion_reports (
  chain_id integer NOT NULL,
  manager text NOT NULL CHECK (manager ~ '^0x[0-9a-f]{40}$'),
  subscription_id uint256 NOT NULL,
  period_start bigint NOT NULL,
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (chain_id, manager, subscription_id, period_start)
);
