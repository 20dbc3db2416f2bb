-- The token each of an agent's subscriptions is paid in, so the budget's holds are summed per token:
-- the SubscriptionManager's allowance is per token, and each token's approval is topped up to exactly
-- what that token's holds reserve (src/agent/subscriptions/createSubscriptionKeeper.ts). Rows written
-- before this column are filled in by the watcher's next look (from the plan, on chain).
ALTER TABLE agent_plan_subscriptions
  ADD COLUMN token text CHECK (token IS NULL OR token ~ '^0x[0-9a-f]{40}$');
