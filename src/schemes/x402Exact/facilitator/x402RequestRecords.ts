/**
 * Which x402 request owns an x402 payment (table `x402_settle_requests`, migration 0061).
 *
 * Invariant: an authorization is owned by at most one request identity, the first one recorded, for
 * good. `/x402/settle` answers success only to its owner, so one transfer is answered as settled to one
 * x402 request (and its identical retries), never to a replay of the same authorization inside another
 * request. For a standard x402 resource server, which keeps no replay guard of its own, `answered_at`
 * makes that success answered once.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { canonicalJson } from "../../../protocol/canonicalJson.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { X402VerifyRequest } from "../../../protocol/x402.ts";
import { queryOneParsed } from "../../../store/queryParsed.ts";
import type { Queryable } from "../../../store/store.ts";

const OwnerRowSchema = z.object({ request_hash: z.string().regex(/^[0-9a-f]{64}$/) });

/**
 * The identity of an x402 verify/settle request: sha256 (hex) of the canonical JSON of the whole body,
 * `{ x402Version, paymentPayload, paymentRequirements }` with every field it carries. Two requests are
 * the same request exactly when their bodies are the same JSON value (key order and whitespace aside):
 * a retry by the same resource server is, a replay of the payload with other requirements (another
 * gate, another price or timeout) or another `resource` is not.
 */
export function x402RequestHash(request: X402VerifyRequest): string {
  let text: string;
  try {
    text = canonicalJson(request);
  } catch (cause) {
    // Only a number JSON cannot write back (1e999 read as Infinity) gets here.
    throw new TollgateError("InvalidRequest", "x402 request body holds a value JSON cannot represent", {
      cause,
    });
  }
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * Records `requestHash` as the owner of the authorization `nonce` unless another request owns it
 * already; one statement, so of concurrent claims exactly one wins. Returns the owner after the call.
 */
export async function claimX402Request(db: Queryable, nonce: string, requestHash: string): Promise<string> {
  const inserted = await queryOneParsed(
    db,
    OwnerRowSchema,
    `INSERT INTO x402_settle_requests (nonce, request_hash) VALUES ($1, $2)
     ON CONFLICT (nonce) DO NOTHING RETURNING request_hash`,
    [nonce.toLowerCase(), requestHash],
  );
  if (inserted !== undefined) return inserted.request_hash;
  const owner = await findX402Request(db, nonce);
  if (owner === undefined)
    throw new TollgateError("Internal", "x402 request owner vanished after a conflict");
  return owner;
}

/** The request hash that owns the authorization `nonce`, if any. */
export async function findX402Request(db: Queryable, nonce: string): Promise<string | undefined> {
  const row = await queryOneParsed(
    db,
    OwnerRowSchema,
    "SELECT request_hash FROM x402_settle_requests WHERE nonce = $1",
    [nonce.toLowerCase()],
  );
  return row?.request_hash;
}

/**
 * Records that `success` was answered to the owner of `nonce`, once: resolves `true` for the first call
 * (of any number racing), `false` after that or when `requestHash` is not the owner.
 */
export async function markX402Answered(db: Queryable, nonce: string, requestHash: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE x402_settle_requests SET answered_at = now()
     WHERE nonce = $1 AND request_hash = $2 AND answered_at IS NULL RETURNING 1 AS marked`,
    [nonce.toLowerCase(), requestHash],
  );
  return rows.length === 1;
}
