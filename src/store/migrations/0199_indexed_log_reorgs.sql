-- Following a reorganisation in the subscription index (src/facilitator/subscriptions/subscriptionIndexer.ts)
-- instead of rebuilding it: each applied log keeps the hash of its block, so the logs a reorganisation
-- removed are told from those still on the chain; and an event recorded from a removed log is marked
-- undone (`undone_at`), so analytics stops counting a renewal or deduction the chain no longer holds. An
-- undone event whose transaction is mined again with the same outcome (the facilitator sends its
-- renewals and deductions again) is revived rather than recorded a second time.
ALTER TABLE indexed_logs ADD COLUMN block_hash text CHECK (block_hash ~ '^0x[0-9a-f]{64}$');
CREATE INDEX indexed_logs_block_idx ON indexed_logs (chain_id, block_number);

ALTER TABLE events ADD COLUMN undone_at timestamptz;
CREATE INDEX events_undone_idx ON events (type, id) WHERE undone_at IS NOT NULL;
-- The events of one log, found when a reorganisation removes it (only events recorded from a log carry
-- a logIndex).
CREATE INDEX events_log_idx ON events ((data ->> 'transaction'), (data ->> 'logIndex'))
  WHERE data ? 'logIndex';
