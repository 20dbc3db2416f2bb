-- The tag of the channel voucher store kept in this database (docs/channels.md "One voucher, one gate"):
-- made by the first gate instance that asks and the same for every instance sharing the database. Gates
-- offer it in their 402s and serve only channels whose salt starts with it.
-- Written by src/schemes/channel/postgresVoucherStore.ts.
CREATE TABLE gate_channel_store (
  id smallint PRIMARY KEY CHECK (id = 1),
  tag text NOT NULL CHECK (tag ~ '^0x[0-9a-f]{16}$'),
  created_at timestamptz NOT NULL DEFAULT now()
);
