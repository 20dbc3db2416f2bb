-- A gate's channel tallies (docs/channels.md "Stores"), shared by every gate instance of one seller
-- through PostgreSQL: per channel the largest voucher the gate holds (`highest`, with its P-256
-- signature: what the seller claims), what it served against it (`spent`), what it has handed to the
-- facilitator (`forwarded`) and where the channel started when this store first saw it (`floor`, its
-- on-chain `claimed`). Invariant: floor <= spent <= highest. Written by
-- src/schemes/channel/postgresVoucherStore.ts; one conditional UPDATE charges a request atomically.
CREATE TABLE gate_channel_tallies (
  channel_id text PRIMARY KEY CHECK (channel_id ~ '^0x[0-9a-f]{64}$'),
  highest uint256 NOT NULL,
  spent uint256 NOT NULL,
  forwarded uint256 NOT NULL,
  floor uint256 NOT NULL,
  -- Empty until the first voucher above the floor.
  signature bytea NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  CHECK (floor <= spent AND spent <= highest)
);

-- The forwarder's scan: channels holding a voucher the facilitator has not been given.
CREATE INDEX gate_channel_tallies_unforwarded ON gate_channel_tallies (updated_at) WHERE highest > forwarded;
