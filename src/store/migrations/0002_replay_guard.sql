-- Consumed payment memos for the PostgreSQL replay guard (DESIGN.md §2.4, §5): a proof's memo is
-- accepted once across every gate instance sharing this database.
CREATE TABLE consumed_memos (
  -- sha256 of the key: a fixed 32 bytes however long the memo is.
  key_hash bytea PRIMARY KEY CHECK (octet_length(key_hash) = 32),
  -- Milliseconds since the Unix epoch after which the memo is void anyway and the row may go.
  expires_at_ms bigint NOT NULL
);

CREATE INDEX consumed_memos_expires_idx ON consumed_memos (expires_at_ms);
