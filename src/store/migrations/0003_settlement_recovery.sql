-- Settlement engine, second step: what crash recovery and x402 settlement need.
--
-- A batch's signed raw transaction is recorded before it is broadcast, so after a crash the same
-- transaction (same hash, same account nonce) can be looked up or broadcast again, never re-signed
-- into a second one. Payments settled for standard x402 clients carry no memo.
ALTER TABLE settlement_batches ADD COLUMN token text CHECK (token ~ '^0x[0-9a-f]{40}$');
ALTER TABLE settlement_batches ADD COLUMN raw_tx text;
ALTER TABLE settlement_batches ADD COLUMN block_number numeric(78, 0);

ALTER TABLE payments ALTER COLUMN memo DROP NOT NULL;
ALTER TABLE payments ADD COLUMN source text NOT NULL DEFAULT 'tollgate' CHECK (source IN ('tollgate', 'x402'));
ALTER TABLE payments ADD COLUMN attempts integer NOT NULL DEFAULT 0;
ALTER TABLE payments ADD COLUMN block_number numeric(78, 0);
-- A Tollgate payment is always bound to a memo; only x402 payments may lack one.
ALTER TABLE payments ADD CONSTRAINT payments_memo_required CHECK (source = 'x402' OR memo IS NOT NULL);
