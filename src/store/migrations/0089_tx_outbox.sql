-- The facilitator's transaction outbox (docs/facilitator.md, "The transaction outbox"): every
-- transaction the gas account sends is a row here, whatever produced it (settlement batches, usage
-- deductions, renewals, relayed calls, channel claims).
--
-- Life of a row: queued -> signed (nonce, raw bytes and hash recorded in the transaction that assigned
-- the nonce, before any broadcast) -> broadcast -> confirmed | reverted | dropped. A row that reaches a
-- final state does so in the same store transaction as its producer's handler, so an outcome is
-- delivered exactly once, across crashes and instances. After a crash a signed row is looked up or
-- broadcast again with its recorded bytes; it is never signed a second time.
CREATE TABLE tx_outbox (
  id bigserial PRIMARY KEY,
  chain_id bigint NOT NULL,
  sender text NOT NULL CHECK (sender ~ '^0x[0-9a-f]{40}$'),
  kind text NOT NULL CHECK (length(kind) BETWEEN 1 AND 64),
  owner text NOT NULL CHECK (length(owner) <= 200),
  meta jsonb,
  to_address text NOT NULL CHECK (to_address ~ '^0x[0-9a-f]{40}$'),
  data text NOT NULL CHECK (data ~ '^0x[0-9a-f]*$'),
  value uint256 NOT NULL DEFAULT 0,
  gas_limit uint256 NOT NULL,
  status text NOT NULL DEFAULT 'queued'
    CHECK (status IN ('queued', 'signed', 'broadcast', 'confirmed', 'reverted', 'dropped')),
  nonce bigint,
  tx_hash text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
  raw_tx text,
  -- Hashes of earlier signatures of this row at the same nonce (fee bumps): any of them may be mined.
  replaced_hashes text[] NOT NULL DEFAULT '{}',
  from_block numeric(78, 0),
  block_number numeric(78, 0),
  failure text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  signed_at timestamptz,
  done_at timestamptz,
  CHECK ((status = 'queued') = (nonce IS NULL) OR status = 'dropped'),
  CHECK (status IN ('queued', 'dropped') OR (raw_tx IS NOT NULL AND tx_hash IS NOT NULL))
);

-- One live transaction per account nonce; a dropped row gives its nonce up (to a filler, say).
CREATE UNIQUE INDEX tx_outbox_nonce_idx ON tx_outbox (chain_id, sender, nonce)
  WHERE nonce IS NOT NULL AND status <> 'dropped';
CREATE INDEX tx_outbox_open_idx ON tx_outbox (chain_id, sender, status, id)
  WHERE status IN ('queued', 'signed', 'broadcast');
CREATE INDEX tx_outbox_owner_idx ON tx_outbox (kind, owner);

-- The nonce manager's shared half: the next account nonce of each gas key. Signing locks this row,
-- so facilitator instances sharing one database never hand out the same nonce.
CREATE TABLE tx_senders (
  chain_id bigint NOT NULL,
  sender text NOT NULL CHECK (sender ~ '^0x[0-9a-f]{40}$'),
  next_nonce bigint NOT NULL CHECK (next_nonce >= 0),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (chain_id, sender)
);

-- Batches name the outbox row that carries their transaction.
ALTER TABLE settlement_batches ADD COLUMN outbox_id bigint REFERENCES tx_outbox (id);
ALTER TABLE usage_batches ADD COLUMN outbox_id bigint REFERENCES tx_outbox (id);
