-- A run's spend may be paid by a prepaid channel's voucher: the dashboard records it under its own mode
-- instead of losing the row to the mode check.
ALTER TABLE agent_run_spends DROP CONSTRAINT IF EXISTS agent_run_spends_mode_check;
ALTER TABLE agent_run_spends ADD CONSTRAINT agent_run_spends_mode_check
  CHECK (mode IN ('one-time', 'subscription', 'metered', 'channel', 'free'));
