-- One wallet's signed subscription actions, one at a time across processes (src/agent/subscriptions/
-- walletTurns.ts): the process whose row this is holds the wallet's turn until it deletes the row or
-- `expires_at` (the database's clock) passes, when another process may take it over. Each action
-- reads the wallet's manager or permit nonce and its holds just before signing: two processes at once
-- would sign the same nonce (one reverts) or set an approval that misses the other's hold.
CREATE TABLE agent_wallet_turns (
  wallet text PRIMARY KEY,
  holder text NOT NULL,
  expires_at timestamptz NOT NULL
);
