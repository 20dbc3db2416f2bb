-- Settlement engine (DESIGN.md §4): a payment row is written before its transaction is sent and
-- completed after confirmation, so a crash at any point neither loses a settled payment nor pays twice.
--
-- Conventions for every Tollgate table:
-- - uint256 values (amounts, EIP-3009 validAfter/validBefore) use the `uint256` domain below: exact
--   numeric(78,0) (2^256 - 1 has 78 digits) limited to the range a uint256 can hold.
-- - Addresses and hashes are lowercase 0x-hex text; compare with `=`, checksum addresses on output.
-- - Timestamps are timestamptz; `updated_at` is set by the statement that changes the row.
-- - Work shared by several facilitator instances is claimed with `FOR UPDATE SKIP LOCKED`.

CREATE DOMAIN uint256 AS numeric(78, 0)
  CHECK (VALUE >= 0 AND VALUE <= 115792089237316195423570985008687907853269984665640564039457584007913129639935);

-- One on-chain transaction settling one or more payments through the batch-settlement contract.
CREATE TABLE settlement_batches (
  id bigserial PRIMARY KEY,
  status text NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'submitted', 'confirmed', 'failed')),
  network text NOT NULL,
  -- The facilitator account that sends the transaction and the account nonce it used: together
  -- they identify the transaction even before its hash is known, for recovery after a crash.
  sender text CHECK (sender ~ '^0x[0-9a-f]{40}$'),
  sender_nonce bigint,
  tx_hash text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
  item_count integer NOT NULL DEFAULT 0 CHECK (item_count >= 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (network, sender, sender_nonce)
);

CREATE INDEX settlement_batches_open_idx ON settlement_batches (status, id)
  WHERE status IN ('pending', 'submitted');

-- One signed EIP-3009 authorization (DESIGN.md §2.3). `nonce` = keccak256(utf8(memo)) makes a memo
-- payable once: a second /authorize for it finds this row instead of inserting another.
CREATE TABLE payments (
  id bigserial PRIMARY KEY,
  nonce text NOT NULL UNIQUE CHECK (nonce ~ '^0x[0-9a-f]{64}$'),
  network text NOT NULL,
  token text NOT NULL CHECK (token ~ '^0x[0-9a-f]{40}$'),
  payer text NOT NULL CHECK (payer ~ '^0x[0-9a-f]{40}$'),
  pay_to text NOT NULL CHECK (pay_to ~ '^0x[0-9a-f]{40}$'),
  amount uint256 NOT NULL,
  memo text NOT NULL,
  scheme text NOT NULL,
  valid_after uint256 NOT NULL,
  valid_before uint256 NOT NULL,
  signature text NOT NULL,
  status text NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'submitted', 'settled', 'failed')),
  batch_id bigint REFERENCES settlement_batches (id),
  tx_hash text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
  failure_code text,
  failure_message text,
  -- The signed payment proof (DESIGN.md §2.4), kept so a repeated /authorize returns the same proof.
  proof jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  settled_at timestamptz,
  CHECK ((status = 'settled') = (settled_at IS NOT NULL))
);

-- The settlement worker's queue: small, because settled and failed rows leave it.
CREATE INDEX payments_open_idx ON payments (status, id) WHERE status IN ('pending', 'submitted');
CREATE INDEX payments_batch_idx ON payments (batch_id) WHERE batch_id IS NOT NULL;
-- Analytics per provider over time (DESIGN.md §4).
CREATE INDEX payments_pay_to_idx ON payments (pay_to, created_at);

-- The append-only event log that webhooks and analytics read, in `id` order.
CREATE TABLE events (
  id bigserial PRIMARY KEY,
  type text NOT NULL,
  data jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX events_type_idx ON events (type, id);
