-- Leased allowance for gate instances sharing one usage ledger (docs/gate.md, "Metering across
-- instances"; src/gate/metering/usageLeases.ts): an instance leases a block of a subscription's units,
-- persists each use it answers into its lease (one statement for every use in flight), and returns the
-- lease when it is used up or idle; a lease not returned by its expiry (by the database clock) is
-- reclaimed by any instance with exactly the units persisted into it. A spend into a lease that is no
-- longer active is refused (fencing), so a reclaimed lease is never counted twice.

ALTER TABLE gate_usage_cycles
  -- Units out on live leases of this cycle.
  ADD COLUMN leased bigint NOT NULL DEFAULT 0 CHECK (leased >= 0),
  -- Counts the subscription's cycles: a lease ends into the cycle it was granted in only.
  ADD COLUMN epoch integer NOT NULL DEFAULT 1;

CREATE TABLE gate_usage_leases (
  id bigserial PRIMARY KEY,
  ledger text NOT NULL REFERENCES gate_usage_ledgers (name),
  subscription_id uint256 NOT NULL,
  epoch integer NOT NULL,
  units bigint NOT NULL CHECK (units > 0),
  -- Units answered for: persisted before each answer, so reclaiming counts exactly these.
  spent bigint NOT NULL DEFAULT 0 CHECK (spent >= 0 AND spent <= units),
  -- Units of the cycle counted or leased before this block, and the plan terms at grant.
  base bigint NOT NULL,
  included_units bigint NOT NULL,
  unit_price uint256 NOT NULL,
  -- The most this block can charge, counted in the ledger's unsettled figure until the lease ends.
  worst uint256 NOT NULL,
  state text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'returned', 'reclaimed')),
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  ended_at timestamptz
);

CREATE INDEX gate_usage_leases_active_idx ON gate_usage_leases (ledger, expires_at) WHERE state = 'active';
