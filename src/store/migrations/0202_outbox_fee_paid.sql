-- What each mined outbox transaction cost the gas key, in wei: gasUsed × effectiveGasPrice from its
-- receipt, plus the L1 data fee an OP Stack chain (Base) charges beside it. Recorded with the outcome;
-- the gas key's runway (src/facilitator/gasRunway.ts) sums the recent ones: the balance divided by the
-- recent spend says how long the key lasts.
ALTER TABLE tx_outbox ADD COLUMN fee_paid numeric(78, 0);

-- The runway's one read: the key's mined transactions of a recent window.
CREATE INDEX tx_outbox_fee_paid_idx ON tx_outbox (chain_id, sender, done_at)
  WHERE fee_paid IS NOT NULL;
