-- The hash of the block a log follower's cursor points at: when the chain no longer has that block
-- (a devnet restarted under the same database, or a reorg deeper than the follower's confirmations),
-- the follower notices and rebuilds its index instead of silently skipping the new chain's logs.
ALTER TABLE chain_cursors ADD COLUMN block_hash text;
