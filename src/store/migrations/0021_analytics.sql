-- Analytics (DESIGN.md §4): volume, count and unique payers per provider, from settled payments and
-- the subscription and allowance charges in the event log, bucketed by time.
CREATE INDEX events_provider_charges_idx ON events (lower(data ->> 'provider'), created_at)
  WHERE type IN ('subscription.created', 'subscription.renewed', 'allowance.deducted');
CREATE INDEX payments_settled_pay_to_idx ON payments (pay_to, settled_at) WHERE status = 'settled';
