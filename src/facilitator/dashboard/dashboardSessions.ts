/**
 * Dashboard sessions in the store (migration 0100). The cookie carries a random id; the store keeps
 * its sha256. A session ends when it is idle longer than `idleMs`, older than `maxAgeMs`, signed out,
 * or — for a provider — when the API key it was opened with is revoked.
 */
import { createHash, randomBytes as nodeRandomBytes } from "node:crypto";
import { type Address, getAddress } from "viem";
import { z } from "zod";
import { base64UrlEncode } from "../../protocol/base64.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";

/** Who a session belongs to: a provider (through one of its API keys) or the agent operator. */
export type DashboardPrincipal = { kind: "provider"; provider: Address; keyId: number } | { kind: "agent" };

export type DashboardSession = DashboardPrincipal & {
  csrfToken: string;
  expiresAt: Date;
};

export type DashboardSessionOptions = {
  /** A session unused this long ends (default 30 minutes). */
  idleMs?: number | undefined;
  /** A session ends this long after sign-in whatever its use (default 8 hours). */
  maxAgeMs?: number | undefined;
  randomBytes?: ((size: number) => Uint8Array) | undefined;
};

export type DashboardSessions = ReturnType<typeof createDashboardSessions>;

const SessionRowSchema = z.object({
  kind: z.enum(["provider", "agent"]),
  provider: z.string().nullable(),
  key_id: SafeIntColumnSchema.nullable(),
  csrf_token: z.string(),
  created_at: TimestampColumnSchema,
  expires_at: TimestampColumnSchema,
  key_active: z.boolean().nullable(),
});

/** Session ids are 32 random bytes, base64url: 43 characters. */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9_-]{43}$/;

function hashId(id: string): Uint8Array {
  return createHash("sha256").update(id, "utf8").digest();
}

/** Opens, reads and ends dashboard sessions in `db`. */
export function createDashboardSessions(db: Queryable, options: DashboardSessionOptions = {}) {
  const idleMs = options.idleMs ?? 30 * 60_000;
  const maxAgeMs = options.maxAgeMs ?? 8 * 3_600_000;
  const random = options.randomBytes ?? ((size: number) => new Uint8Array(nodeRandomBytes(size)));

  const close = async (id: string): Promise<void> => {
    if (!SESSION_ID_PATTERN.test(id)) return;
    await db.query("DELETE FROM dashboard_sessions WHERE id_hash = $1", [hashId(id)]);
  };

  return {
    idleMs,
    /** Starts a session; returns its id (for the cookie only) and the session. */
    async open(principal: DashboardPrincipal, now: Date): Promise<{ id: string; session: DashboardSession }> {
      const id = base64UrlEncode(random(32));
      const csrfToken = base64UrlEncode(random(32));
      const expiresAt = new Date(Math.min(now.getTime() + idleMs, now.getTime() + maxAgeMs));
      // Expired rows are swept on sign-in, so the table holds at most the live sessions plus a few.
      await db.query("DELETE FROM dashboard_sessions WHERE expires_at <= $1", [now]);
      await db.query(
        `INSERT INTO dashboard_sessions (id_hash, kind, provider, key_id, csrf_token, created_at, last_seen_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $6, $7)`,
        [
          hashId(id),
          principal.kind,
          principal.kind === "provider" ? principal.provider.toLowerCase() : null,
          principal.kind === "provider" ? principal.keyId : null,
          csrfToken,
          now,
          expiresAt,
        ],
      );
      return { id, session: { ...principal, csrfToken, expiresAt } };
    },

    /**
     * The live session with this id, its idle expiry moved forward (never past its maximum age);
     * `undefined` when unknown, expired, or opened with a key since revoked.
     */
    async touch(id: string, now: Date): Promise<DashboardSession | undefined> {
      if (!SESSION_ID_PATTERN.test(id)) return undefined;
      const row = await queryOneParsed(
        db,
        SessionRowSchema,
        `SELECT s.kind, s.provider, s.key_id, s.csrf_token, s.created_at, s.expires_at,
           (k.id IS NOT NULL AND k.revoked_at IS NULL) AS key_active
         FROM dashboard_sessions s LEFT JOIN provider_api_keys k ON k.id = s.key_id
         WHERE s.id_hash = $1`,
        [hashId(id)],
      );
      if (row === undefined || row.expires_at.getTime() <= now.getTime()) return undefined;
      if (row.kind === "provider" && row.key_active !== true) {
        await close(id);
        return undefined;
      }
      const expiresAt = new Date(Math.min(now.getTime() + idleMs, row.created_at.getTime() + maxAgeMs));
      await db.query("UPDATE dashboard_sessions SET last_seen_at = $2, expires_at = $3 WHERE id_hash = $1", [
        hashId(id),
        now,
        expiresAt,
      ]);
      const base = { csrfToken: row.csrf_token, expiresAt };
      if (row.kind === "agent") return { kind: "agent", ...base };
      if (row.provider === null || row.key_id === null) return undefined;
      return { kind: "provider", provider: getAddress(row.provider), keyId: row.key_id, ...base };
    },

    /** Ends a session (sign-out). */
    close,
  };
}
