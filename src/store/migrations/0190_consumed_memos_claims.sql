-- Claims in the replay guard (replayGuard.ts, createPostgresReplayGuard.ts): a proof's key is held in
-- flight while its request is served, and marked used once the answer is written. A claim whose lease
-- has passed (its gate died before answering) may be taken over by the same request. A row with
-- lease_until_ms NULL is used for good, as every row before this migration.
ALTER TABLE consumed_memos
  -- sha256 of the request the claim is for: only the same request may take an expired lease over.
  ADD COLUMN request_hash bytea CHECK (octet_length(request_hash) = 32),
  -- Until when (ms since the Unix epoch, the gate's clock) the claim holds; NULL once used for good.
  ADD COLUMN lease_until_ms bigint,
  -- The holder's token: only it may release the claim.
  ADD COLUMN claim_token text,
  -- Claims the key has had (the first and its takeovers).
  ADD COLUMN claims integer NOT NULL DEFAULT 0,
  ADD CONSTRAINT consumed_memos_claim_whole CHECK (
    (lease_until_ms IS NULL AND request_hash IS NULL AND claim_token IS NULL)
    OR (lease_until_ms IS NOT NULL AND request_hash IS NOT NULL AND claim_token IS NOT NULL)
  );
