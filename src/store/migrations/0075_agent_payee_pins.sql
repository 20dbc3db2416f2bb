-- Payees pinned per agent and origin for paid tools without a listing (src/agent/offerCheck.ts,
-- docs/budgets.md "Whose limit a spend counts against"): the first `payTo` an origin's 402 named.
-- Later 402s from that origin must name it too, in this process, the next one, or another process of
-- the same agent, so a seller cannot start a fresh per-provider limit by rotating `payTo` between
-- runs. The first pin wins (INSERT … ON CONFLICT DO NOTHING); a pin is only removed by hand.
CREATE TABLE agent_payee_pins (
  agent text NOT NULL CHECK (agent ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'),
  -- scheme://host[:port], as `new URL(url).origin` writes it.
  origin text NOT NULL CHECK (length(origin) <= 300 AND origin ~ '^https?://[^/?#[:space:]]+$'),
  pay_to text NOT NULL CHECK (pay_to ~ '^0x[0-9a-f]{40}$'),
  pinned_at timestamptz NOT NULL,
  PRIMARY KEY (agent, origin)
);
