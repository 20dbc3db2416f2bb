-- Market seller liveness (src/market/sellerLiveness.ts, docs/market.md "Liveness"): the market reads
-- each seller's `/.well-known/tollgate.json` on a schedule, and sooner when a buyer reports a failure;
-- a seller that stops answering is marked unreachable and left out of catalog searches until it
-- answers again. It stays registered (and listed by GET /sellers, marked) meanwhile.

-- Last liveness check, whatever its outcome.
ALTER TABLE market_sellers ADD COLUMN checked_at timestamptz;
-- When the next check is due: set to now on registration, pushed back by the interval after a success
-- and by an exponential back-off after failures; a checker claims a due row by moving it forward.
ALTER TABLE market_sellers ADD COLUMN next_check_at timestamptz;
-- Consecutive failed checks (0 after any success).
ALTER TABLE market_sellers ADD COLUMN check_failures integer NOT NULL DEFAULT 0
  CHECK (check_failures >= 0);
-- Set when the failures reached the threshold; NULL while the seller is considered reachable.
ALTER TABLE market_sellers ADD COLUMN unreachable_since timestamptz;
-- Why the last check failed (a short reason code such as `connection_refused`, `http_503`), or NULL.
ALTER TABLE market_sellers ADD COLUMN last_check_error text CHECK (length(last_check_error) <= 64);

CREATE INDEX market_sellers_next_check ON market_sellers (next_check_at) WHERE removed_at IS NULL;
