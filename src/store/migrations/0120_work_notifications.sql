-- Work notifications (docs/facilitator.md, "At rest"): a row of new work wakes the facilitator's workers
-- that serve it, in this process and, on PostgreSQL, in every instance sharing the database, instead of
-- each worker polling its table. The channel is `tollgate_<schema>_<name>` (Store.listen), so stores in
-- different schemas of one database do not wake each other. NOTIFY is transactional: listeners hear it
-- when the writing transaction commits, never for one that rolls back, once per transaction.
CREATE FUNCTION tollgate_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('tollgate_' || TG_TABLE_SCHEMA || '_' || TG_ARGV[0], '');
  RETURN NULL;
END
$$;

CREATE TRIGGER payments_wake AFTER INSERT ON payments
  FOR EACH STATEMENT EXECUTE FUNCTION tollgate_wake('payments');
CREATE TRIGGER tx_outbox_wake AFTER INSERT ON tx_outbox
  FOR EACH STATEMENT EXECUTE FUNCTION tollgate_wake('outbox');
CREATE TRIGGER usage_records_wake AFTER INSERT ON usage_records
  FOR EACH STATEMENT EXECUTE FUNCTION tollgate_wake('usage');
CREATE TRIGGER events_wake AFTER INSERT ON events
  FOR EACH STATEMENT EXECUTE FUNCTION tollgate_wake('events');
-- A delivery queued, requeued by hand or rescheduled: the webhook worker looks again.
CREATE TRIGGER webhook_deliveries_wake AFTER INSERT OR UPDATE OF next_attempt_at ON webhook_deliveries
  FOR EACH STATEMENT EXECUTE FUNCTION tollgate_wake('webhooks');
