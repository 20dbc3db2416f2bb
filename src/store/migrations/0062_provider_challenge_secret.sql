-- Provider registration challenges are sealed, not stored (issue 10, finding 11): POST
-- /providers/challenge writes nothing, so a stranger asking for challenges in a provider's name can
-- no longer evict the provider's own. The challenge carries an HMAC under this secret, which every
-- facilitator instance sharing the database reads, so a challenge issued by one is accepted by another.
-- It only shows that a challenge text came from this facilitator; registering still needs the payout
-- key's signature over it.
CREATE TABLE facilitator_secrets (
  name text PRIMARY KEY,
  secret bytea NOT NULL CHECK (octet_length(secret) >= 32),
  created_at timestamptz NOT NULL DEFAULT now()
);

-- provider_challenges now holds only challenges that were used (until they expire), so a challenge
-- registers once; rows are written by a registration whose signature checked out.
