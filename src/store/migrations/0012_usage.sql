-- Metered usage (DESIGN.md §4, §5): providers record deductions with POST /usage; a worker settles them
-- on chain in batches with SubscriptionManager.deductAllowanceMany.
--
-- Crash safety follows the settlement engine's rules: a record is written (pending) before anything is
-- sent; records are claimed into a batch whose signed transaction (raw bytes, hash, account nonce) is
-- stored before it is broadcast; outcomes come only from the receipt's per-item events, or, for a
-- transaction displaced from its nonce, from the chain's AllowanceDeducted logs for each record's ref.

CREATE TABLE usage_batches (
  id bigserial PRIMARY KEY,
  chain_id integer NOT NULL,
  manager text NOT NULL CHECK (manager ~ '^0x[0-9a-f]{40}$'),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'submitted', 'confirmed', 'failed')),
  sender text CHECK (sender ~ '^0x[0-9a-f]{40}$'),
  sender_nonce bigint,
  tx_hash text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
  raw_tx text,
  block_number numeric(78, 0),
  item_count integer NOT NULL DEFAULT 0 CHECK (item_count >= 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX usage_batches_open_idx ON usage_batches (status, id) WHERE status IN ('pending', 'submitted');

CREATE TABLE usage_records (
  id bigserial PRIMARY KEY,
  chain_id integer NOT NULL,
  manager text NOT NULL CHECK (manager ~ '^0x[0-9a-f]{40}$'),
  provider text NOT NULL CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  -- The provider's idempotency key: the same (provider, ref) is recorded once.
  ref text NOT NULL CHECK (length(ref) BETWEEN 1 AND 64),
  -- bytes32 passed to the contract and echoed in AllowanceDeducted / DeductionFailed:
  -- keccak256 of the provider and its ref, unique per deployment.
  chain_ref text NOT NULL CHECK (chain_ref ~ '^0x[0-9a-f]{64}$'),
  subscription_id numeric(78, 0) NOT NULL,
  amount uint256 NOT NULL CHECK (amount > 0),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'submitted', 'settled', 'failed')),
  batch_id bigint REFERENCES usage_batches (id),
  attempts integer NOT NULL DEFAULT 0,
  tx_hash text CHECK (tx_hash ~ '^0x[0-9a-f]{64}$'),
  failure_code text,
  failure_message text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  settled_at timestamptz,
  UNIQUE (chain_id, manager, provider, ref),
  UNIQUE (chain_id, manager, chain_ref),
  CHECK ((status = 'settled') = (settled_at IS NOT NULL))
);

CREATE INDEX usage_records_open_idx ON usage_records (status, id) WHERE status IN ('pending', 'submitted');
CREATE INDEX usage_records_batch_idx ON usage_records (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX usage_records_subscription_idx ON usage_records (chain_id, manager, subscription_id, status);
CREATE INDEX usage_records_chain_ref_idx ON usage_records (chain_ref);
