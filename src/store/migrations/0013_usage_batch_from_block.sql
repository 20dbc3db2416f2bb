-- The chain head when a usage batch was signed: a transaction displaced from its nonce is resolved by
-- looking for each record's AllowanceDeducted log from this block on, never scanning from genesis.
ALTER TABLE usage_batches ADD COLUMN from_block numeric(78, 0);
