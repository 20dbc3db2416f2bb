-- The hash of the block a final row's transaction was mined in, from its receipt. The reorganisation
-- watch (src/facilitator/outbox/confirmedRowWatch.ts) compares it with the canonical chain; kept in the
-- store so a facilitator that restarts (or another instance) still notices a confirmed row whose block
-- a reorganisation replaced, also one that happened while it was down. NULL on rows recorded before.
ALTER TABLE tx_outbox ADD COLUMN block_hash text CHECK (block_hash ~ '^0x[0-9a-f]{64}$');

-- The watch's read: confirmed rows of the watched kinds, newest blocks first.
CREATE INDEX tx_outbox_confirmed_idx ON tx_outbox (chain_id, sender, block_number)
  WHERE status = 'confirmed';
