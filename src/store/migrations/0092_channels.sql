-- Prepaid channels (docs/channels.md): what the facilitator knows of each TollgateChannels channel it
-- opened or holds vouchers for, the latest voucher per channel, and the claim in flight.
--
-- Money rules:
-- - The chain is the truth for deposit, claimed and close state; these columns are a cache refreshed
--   from it (reads, claim receipts) and never the basis of a payment on their own.
-- - voucher_amount only grows (UPDATE … WHERE voucher_amount < new): a resent or older voucher is a
--   no-op, so the gate may hand vouchers over any number of times.
-- - A claim is recorded with its outbox row (claim_outbox_id) in the transaction that enqueues it, and
--   cleared by the outbox handler that records its outcome, exactly once across crashes and instances.

CREATE TABLE channels (
  channel_id text PRIMARY KEY CHECK (channel_id ~ '^0x[0-9a-f]{64}$'),
  chain_id integer NOT NULL,
  contract text NOT NULL CHECK (contract ~ '^0x[0-9a-f]{40}$'),
  payer text NOT NULL CHECK (payer ~ '^0x[0-9a-f]{40}$'),
  payee text NOT NULL CHECK (payee ~ '^0x[0-9a-f]{40}$'),
  token text NOT NULL CHECK (token ~ '^0x[0-9a-f]{40}$'),
  deposit uint256 NOT NULL,
  claimed uint256 NOT NULL DEFAULT 0,
  session_key_x text NOT NULL CHECK (session_key_x ~ '^0x[0-9a-f]{64}$'),
  session_key_y text NOT NULL CHECK (session_key_y ~ '^0x[0-9a-f]{64}$'),
  close_delay bigint NOT NULL CHECK (close_delay >= 0),
  close_requested_at bigint NOT NULL DEFAULT 0,
  closed boolean NOT NULL DEFAULT false,
  -- The EIP-3009 nonce of a relayed open (POST /channels is idempotent on it); NULL when opened elsewhere.
  open_nonce text UNIQUE CHECK (open_nonce ~ '^0x[0-9a-f]{64}$'),
  open_tx text CHECK (open_tx ~ '^0x[0-9a-f]{64}$'),
  -- The highest voucher the payee's gate handed over, and when it first exceeded what was claimed.
  voucher_amount uint256 NOT NULL DEFAULT 0,
  voucher_signature text CHECK (voucher_signature ~ '^0x[0-9a-f]{128}$'),
  unclaimed_since timestamptz,
  -- The claim in flight: its outbox row and the cumulative amount it claims.
  claim_outbox_id bigint,
  claim_amount uint256,
  -- Why the last claim of this voucher failed for good (BadSignature, NotPayee, …); cleared by a new voucher.
  claim_error text,
  -- The payee asked for a cooperative close (POST /channels/:id/close).
  close_wanted boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX channels_payee_idx ON channels (payee);
CREATE INDEX channels_unclaimed_idx ON channels (unclaimed_since)
  WHERE NOT closed AND claim_outbox_id IS NULL AND claim_error IS NULL AND voucher_amount > claimed;
