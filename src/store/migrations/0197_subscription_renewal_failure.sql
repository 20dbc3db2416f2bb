-- Why a subscription's last renewal failed, decoded from the SubscriptionManager's RenewalFailed reason
-- (src/facilitator/subscriptions/renewalFailure.ts): an error code such as AccountBlacklisted or
-- InsufficientFunds and its message. Set by the indexer on RenewalFailed, cleared when it renews.
ALTER TABLE subscriptions
  ADD COLUMN renewal_failure_code text,
  ADD COLUMN renewal_failure_message text;
