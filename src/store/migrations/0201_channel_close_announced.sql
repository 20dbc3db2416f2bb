-- Whether a `channel.closed` event announced the channel's close. A cooperative close a chain
-- reorganisation undid is reopened (src/facilitator/channels/channelClaimReorg.ts): the channel is open
-- again in the store until the close is sent again and mined, and the close is then recorded as a first
-- one; this mark keeps its event to one. Set with `closed` by the one call that announces the close.
ALTER TABLE channels ADD COLUMN close_announced boolean NOT NULL DEFAULT false;
UPDATE channels SET close_announced = closed;
