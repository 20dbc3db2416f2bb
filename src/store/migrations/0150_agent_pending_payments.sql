-- One-time payments of an agent whose outcome is unknown (src/agent/budget/pendingPayments.ts): the
-- signed authorization went to the facilitator and no answer came back (a timeout, a 503, a cut
-- connection), so the payment may still settle. Its reservation (`spend_id`) keeps holding the amount,
-- its expiry pushed out, until the payment is read back by `nonce` (GET /payments/:nonce, signed by
-- `payer`): committed once settled; released only after `valid_before` (unix seconds; no transfer can
-- use the authorization after it) when the facilitator has no settled record of it. The row is deleted
-- in the transaction that commits or releases its reservation.
CREATE TABLE agent_pending_payments (
  spend_id text PRIMARY KEY REFERENCES agent_spends (id),
  agent text NOT NULL REFERENCES agent_budgets (agent),
  payer text NOT NULL CHECK (payer ~ '^0x[0-9a-f]{40}$'),
  nonce text NOT NULL CHECK (nonce ~ '^0x[0-9a-f]{64}$'),
  valid_before bigint NOT NULL CHECK (valid_before > 0),
  amount uint256 NOT NULL,
  created_at timestamptz NOT NULL
);

CREATE INDEX agent_pending_payments_agent_idx ON agent_pending_payments (agent);
