-- Dashboard sign-ins (src/facilitator/dashboard/dashboardSessions.ts, docs/dashboard.md). The browser
-- holds only the session id in an HttpOnly cookie; the store keeps its sha256, so a leaked table opens
-- no session. A provider session names the API key it was opened with: revoking the key ends it.
-- `csrf_token` is sent back in every form and compared before any action.
CREATE TABLE dashboard_sessions (
  id_hash bytea PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('provider', 'agent')),
  provider text CHECK (provider ~ '^0x[0-9a-f]{40}$'),
  key_id bigint,
  csrf_token text NOT NULL CHECK (length(csrf_token) BETWEEN 32 AND 128),
  created_at timestamptz NOT NULL,
  last_seen_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  CHECK ((kind = 'provider') = (provider IS NOT NULL AND key_id IS NOT NULL))
);

CREATE INDEX dashboard_sessions_expiry_idx ON dashboard_sessions (expires_at);
