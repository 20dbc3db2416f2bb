-- Market registry (src/market, DESIGN.md §7 Discovery): sellers registered with a manifest signed by
-- their payout key, and one row per capability for catalog search.

-- One row per seller address ever registered. A removed seller keeps its row as a tombstone (manifest
-- columns NULL, removed_at set) so that a registration signed before the removal cannot be replayed:
-- `issued_at` only ever grows, and a write must carry a newer one.
CREATE TABLE market_sellers (
  address text PRIMARY KEY CHECK (address ~ '^0x[0-9a-f]{40}$'),
  -- issuedAt (Unix seconds) of the stored manifest, or of the signed removal for a tombstone.
  issued_at bigint NOT NULL CHECK (issued_at >= 0),
  -- The manifest's canonical JSON exactly as the seller signed it, and the EIP-191 signature.
  manifest text,
  signature text CHECK (signature ~ '^0x[0-9a-f]{130}$'),
  name text,
  description text,
  base_url text,
  facilitator text,
  network text,
  token text CHECK (token ~ '^0x[0-9a-f]{40}$'),
  registered_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  -- Last time the market fetched the seller's manifest itself (POST /sellers/refresh), for rate limiting.
  refreshed_at timestamptz,
  removed_at timestamptz,
  CHECK ((removed_at IS NULL) = (manifest IS NOT NULL))
);

CREATE INDEX market_sellers_listing ON market_sellers (registered_at, address) WHERE removed_at IS NULL;

CREATE TABLE market_capabilities (
  seller text NOT NULL REFERENCES market_sellers (address) ON DELETE CASCADE,
  -- Index in the manifest's `capabilities`, to keep the seller's order.
  position integer NOT NULL CHECK (position >= 0),
  name text NOT NULL,
  -- The capability as parsed from the manifest, JSON text (jsonb would refuse a \u0000 in a schema).
  capability text NOT NULL,
  -- The lowest per-call price over its pricing entries (protocol/manifest.ts `cheapestPerCallPrice`).
  min_price uint256 NOT NULL,
  -- Pricing types offered: 'one-time', 'subscription', 'metered'.
  schemes text[] NOT NULL,
  -- Name (weight A), description (B), seller name and description (C), English stemming.
  search_vector tsvector NOT NULL,
  PRIMARY KEY (seller, name)
);

CREATE INDEX market_capabilities_search ON market_capabilities USING gin (search_vector);
CREATE INDEX market_capabilities_price ON market_capabilities (min_price);
