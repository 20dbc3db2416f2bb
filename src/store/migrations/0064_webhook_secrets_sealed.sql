-- Webhook secrets at rest (issue 10, finding 8): from now on `secret` and `previous_secret` hold the
-- secret sealed with AES-256-GCM (`tgs1.<kid>.<base64url>`, see src/facilitator/webhooks/
-- webhookSecretBox.ts), never the `whsec_…` text itself. The key lives outside the database, so SQL
-- cannot do the sealing: rows written before this migration are sealed by the webhooks module when the
-- facilitator starts (`resealSecrets`, before it serves requests), which then validates this
-- constraint. Until then the constraint is NOT VALID: it refuses every new plaintext write (say, from
-- an older facilitator still running against this database) without refusing the old rows.
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_secret_sealed
  CHECK (secret LIKE 'tgs1.%' AND (previous_secret IS NULL OR previous_secret LIKE 'tgs1.%')) NOT VALID;
