-- What each confirmed channel claim paid, per channel, so a claim a chain reorganisation undid can be
-- reopened from the store alone (src/facilitator/channels/channelClaimReorg.ts): the channel's cached
-- `claimed` goes back to what it was before that claim, and the claim is in flight again.
--
-- - One row per (claim, channel) the claim's receipt said was paid; written in the transaction that
--   records the claim's outcome, deleted in the one that reopens the claim (the re-sent claim's
--   outcome writes it again).
-- - `claimed_before` is the channel's `claimed` on chain just before the claim (cumulative − amount of
--   its ChannelClaimed log).
CREATE TABLE channel_claim_items (
  outbox_id bigint NOT NULL REFERENCES tx_outbox (id),
  channel_id text NOT NULL CHECK (channel_id ~ '^0x[0-9a-f]{64}$'),
  claimed_before uint256 NOT NULL,
  cumulative_amount uint256 NOT NULL,
  PRIMARY KEY (outbox_id, channel_id)
);

-- The highest cumulative amount a `channel.claimed` event announced for the channel: a claim sent again
-- after a reorganisation announces only what goes beyond it, so the events of a channel add up to what
-- the chain says was claimed, however often a claim was undone and sent again.
ALTER TABLE channels ADD COLUMN announced_claimed uint256 NOT NULL DEFAULT 0;
UPDATE channels SET announced_claimed = claimed;
