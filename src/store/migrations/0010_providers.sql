-- Provider accounts (DESIGN.md §4): a provider proves control of its payout address by signing a
-- one-time challenge and receives API keys for the provider-authenticated endpoints (/usage, /webhooks).

-- Challenges issued by POST /providers/challenge. Single use: `used_at` is set by the registration
-- that consumes it, in the same statement that checks it is unused and unexpired.
CREATE TABLE provider_challenges (
  -- sha256 of the challenge text, so lookups need not compare long strings.
  challenge_hash bytea PRIMARY KEY CHECK (octet_length(challenge_hash) = 32),
  address text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$'),
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX provider_challenges_address_idx ON provider_challenges (address, created_at);
CREATE INDEX provider_challenges_expires_idx ON provider_challenges (expires_at);

CREATE TABLE providers (
  address text PRIMARY KEY CHECK (address ~ '^0x[0-9a-f]{40}$'),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- API keys are stored as sha256 of the key; the key itself is shown once. A provider may hold several
-- active keys (so a key can be rotated without downtime); revoked keys stay for the record.
CREATE TABLE provider_api_keys (
  id bigserial PRIMARY KEY,
  provider text NOT NULL REFERENCES providers (address),
  key_hash bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
  prefix text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

CREATE INDEX provider_api_keys_provider_idx ON provider_api_keys (provider) WHERE revoked_at IS NULL;
