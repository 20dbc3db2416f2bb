-- A gate seals a channel's tally when it closes the channel cooperatively for a payer that asked to
-- close (docs/channels.md "Cooperative close"): from then on no instance of the seller charges the
-- channel, so the voucher it hands to the facilitator for the close is the last one it served for.
-- Written by src/schemes/channel/postgresVoucherStore.ts.
ALTER TABLE gate_channel_tallies ADD COLUMN sealed boolean NOT NULL DEFAULT false;
