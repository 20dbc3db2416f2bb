-- An endpoint registered (on any instance) wakes the webhook worker: while no endpoint exists it does
-- not run a round per new event, only at its backstop, and learns of the first endpoint from this
-- notification (createWebhookWorker.ts, "No endpoints").
CREATE TRIGGER webhook_endpoints_wake AFTER INSERT ON webhook_endpoints
  FOR EACH STATEMENT EXECUTE FUNCTION tollgate_wake('webhooks');
