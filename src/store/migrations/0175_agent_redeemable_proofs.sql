-- Proofs of payments whose `/authorize` answer was lost and that were read back as settled later
-- (src/agent/budget/storedProofs.ts, docs/budgets.md "Payments whose answer was lost"): the seller was
-- paid and never saw the proof, so the next call to the same request target — in whichever process of
-- the agent — presents it instead of paying again. `target` is the paid request's method and URL,
-- recorded on the pending payment when its answer was lost. A row is taken (deleted) by the call that
-- presents it; one past `exp` (unix seconds, the gate refuses it after) is of no use and is deleted by
-- the next take. The header is a bearer credential until presented: it lives only in the agent's store.
ALTER TABLE agent_pending_payments ADD COLUMN target text;

CREATE TABLE agent_redeemable_proofs (
  nonce text PRIMARY KEY CHECK (nonce ~ '^0x[0-9a-f]{64}$'),
  agent text NOT NULL,
  target text NOT NULL,
  header text NOT NULL,
  amount uint256 NOT NULL,
  transaction text,
  exp bigint NOT NULL,
  created_at timestamptz NOT NULL
);

CREATE INDEX agent_redeemable_proofs_target_idx ON agent_redeemable_proofs (agent, target);
