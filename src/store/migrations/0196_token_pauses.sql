-- Whether a token this facilitator settles in is paused by its issuer (USDC's pauser), as last seen on
-- chain, and since when (src/facilitator/tokenPauseWatch.ts). Instances sharing the database flip the
-- row with a compare-and-set, so the `token.paused` / `token.unpaused` event of one pause is written
-- once, in the transaction that flips it, and `since` survives a restart.
CREATE TABLE token_pauses (
  chain_id bigint NOT NULL,
  token text NOT NULL CHECK (token ~ '^0x[0-9a-f]{40}$'),
  paused boolean NOT NULL,
  -- When the current state was first seen (the pause's start while paused).
  since timestamptz NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (chain_id, token)
);
