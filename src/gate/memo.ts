/**
 * Stateless memos (docs/protocol.md, "Memo"): `base64url(json) + "." + base64url(hmacSha256(secret, json))`.
 *
 * The gate issues one with every 402 and stores nothing; on the retry the HMAC proves the gate wrote
 * the memo and the fields say what was priced. Only consumed memos are stored (the replay guard).
 */
import { hash, timingSafeEqual } from "node:crypto";
import { base64UrlEncode, utf8Decode } from "../protocol/base64.ts";
import { type MemoPayload, MemoPayloadSchema } from "../protocol/memo.ts";
import { isNetwork } from "../protocol/network.ts";
import { checksummedAddress } from "./addressCache.ts";

/** The HMAC key a gate signs its memos with. At least 32 bytes: it is the gate's only memo secret. */
export type MemoSecret = Uint8Array;

const MIN_SECRET_BYTES = 32;
/** Least entropy a secret must show by its byte frequencies (random 32 bytes show ≥ 139 bits). */
const MIN_ESTIMATED_BITS = 80;

/**
 * Secrets the project once printed in its README, examples or docs. Anyone who read them could forge
 * memos for a gate using one (a memo for 1 micro-USDC bought a 0.50 USDC report), so they are refused
 * for good. `test/security/memoSecret.test.ts` keeps literal secrets out of README, docs and examples.
 */
export const PUBLISHED_MEMO_SECRETS: readonly string[] = [
  "a secret of at least thirty-two bytes, shared by the API's instances",
];

/**
 * Why a memo secret is unfit, or `undefined` when it is fit. Refused: under 32 bytes; one of
 * `PUBLISHED_MEMO_SECRETS` (compared ignoring case and surrounding space); low entropy — fewer than 80
 * bits by a byte-frequency estimate, mostly a repetition of a shorter pattern (`abcabc…`), or mostly a
 * run with a constant step (`aaaa…`, `abcd…`, `0123…`). These are floors against mistakes and copied
 * placeholders, not a proof of randomness: generate the secret (`openssl rand -hex 32`).
 */
export function memoSecretWeakness(secret: Uint8Array): string | undefined {
  if (secret.length < MIN_SECRET_BYTES) {
    return `memo secret must be at least ${MIN_SECRET_BYTES} bytes, got ${secret.length}`;
  }
  const text = Buffer.from(secret).toString("utf8").trim().toLowerCase();
  if (PUBLISHED_MEMO_SECRETS.some((published) => published.toLowerCase() === text)) {
    return "memo secret is one published in Tollgate's documentation, so anyone can forge memos with it; generate one (openssl rand -hex 32)";
  }
  if (
    estimatedBits(secret) < MIN_ESTIMATED_BITS ||
    isMostlyPeriodic(secret) ||
    isMostlyConstantStep(secret)
  ) {
    return "memo secret has too little entropy (a repeated or sequential pattern); generate one (openssl rand -hex 32)";
  }
  return undefined;
}

/** Throws a `TypeError` saying why, for a secret `memoSecretWeakness` refuses. */
export function assertMemoSecret(secret: Uint8Array): void {
  const weakness = memoSecretWeakness(secret);
  if (weakness !== undefined) throw new TypeError(weakness);
}

/** Shannon entropy of the byte frequencies times the length: an upper bound, only good at catching little. */
function estimatedBits(bytes: Uint8Array): number {
  const counts = new Map<number, number>();
  for (const byte of bytes) counts.set(byte, (counts.get(byte) ?? 0) + 1);
  let bitsPerByte = 0;
  for (const count of counts.values()) {
    const p = count / bytes.length;
    bitsPerByte -= p * Math.log2(p);
  }
  return bitsPerByte * bytes.length;
}

/** Whether, for some period up to half the length, at least 3/4 of the bytes equal the one a period back. */
function isMostlyPeriodic(bytes: Uint8Array): boolean {
  for (let period = 1; period <= bytes.length / 2; period++) {
    let same = 0;
    for (let i = period; i < bytes.length; i++) if (bytes[i] === bytes[i - period]) same++;
    if (same >= ((bytes.length - period) * 3) / 4) return true;
  }
  return false;
}

/** Whether at least half the byte triples step by the same amount twice (`aaa`, `abc`, `975`). */
function isMostlyConstantStep(bytes: Uint8Array): boolean {
  let constant = 0;
  for (let i = 2; i < bytes.length; i++) {
    if (
      (bytes[i] as number) - (bytes[i - 1] as number) ===
      (bytes[i - 1] as number) - (bytes[i - 2] as number)
    ) {
      constant++;
    }
  }
  return constant >= (bytes.length - 2) / 2;
}

/**
 * The secret from configuration: bytes as given, or a string taken as its UTF-8 bytes (so a random
 * 64-character hex string from an environment variable gives 64 bytes). Throws a `TypeError` saying why
 * for a secret `memoSecretWeakness` refuses.
 */
export function memoSecretOf(input: Uint8Array | string): MemoSecret {
  const secret =
    typeof input === "string" ? new Uint8Array(Buffer.from(input, "utf8")) : Uint8Array.from(input);
  assertMemoSecret(secret);
  return secret;
}

/**
 * The secret's HMAC-SHA256 pads (RFC 2104), computed once per secret: a gate checks a memo on every
 * paid request, and two one-shot `crypto.hash` calls over the padded key cost a third of what a
 * `createHmac` object does. `inner` holds `key ⊕ ipad` followed by room for the message, `outer`
 * `key ⊕ opad` followed by room for the inner digest. A test compares `mac` with `createHmac`.
 */
type MacPads = { bytes: Buffer; inner: Buffer; outer: Buffer };
const macPads = new WeakMap<MemoSecret, MacPads>();
const SHA256_BLOCK = 64;

function macPadsOf(secret: MemoSecret): MacPads {
  const cached = macPads.get(secret);
  // A caller that rewrote the secret's bytes in place gets fresh pads, never stale ones.
  if (cached?.bytes.equals(secret)) return cached;
  const key = Buffer.alloc(SHA256_BLOCK);
  if (secret.length > SHA256_BLOCK) key.set(hash("sha256", secret, "buffer"));
  else key.set(secret);
  const inner = Buffer.alloc(SHA256_BLOCK + 512);
  const outer = Buffer.alloc(SHA256_BLOCK + 32);
  for (let i = 0; i < SHA256_BLOCK; i++) {
    inner[i] = (key[i] as number) ^ 0x36;
    outer[i] = (key[i] as number) ^ 0x5c;
  }
  const pads = { bytes: Buffer.from(secret), inner, outer };
  macPads.set(secret, pads);
  return pads;
}

/** HMAC-SHA256 of `json` under the secret. Synchronous, so the shared pads cannot interleave. */
export function memoMac(secret: MemoSecret, json: Uint8Array): Buffer {
  const pads = macPadsOf(secret);
  const length = SHA256_BLOCK + json.length;
  if (pads.inner.length < length) {
    const grown = Buffer.alloc(length);
    pads.inner.copy(grown, 0, 0, SHA256_BLOCK);
    pads.inner = grown;
  }
  pads.inner.set(json, SHA256_BLOCK);
  pads.outer.set(hash("sha256", pads.inner.subarray(0, length), "buffer"), SHA256_BLOCK);
  return hash("sha256", pads.outer, "buffer");
}

/** Writes a memo for the payload. */
export function sealMemo(secret: MemoSecret, payload: MemoPayload): string {
  const json = Buffer.from(JSON.stringify(payload), "utf8");
  return `${base64UrlEncode(json)}.${base64UrlEncode(memoMac(secret, json))}`;
}

/** Bytes of randomness in a memo's `r` (docs/protocol.md, "Memo": 96 bits). */
const MEMO_RANDOM_BYTES = 12;

/** Writes a fresh memo for one offer: `r` is 96 random bits, so no two offers share a memo (or a nonce). */
export function issueMemo(
  secret: MemoSecret,
  terms: Omit<MemoPayload, "r">,
  random: (bytes: number) => Uint8Array,
): string {
  return sealMemo(secret, { ...terms, r: base64UrlEncode(random(MEMO_RANDOM_BYTES)) });
}

const BASE64URL_TEXT = /^[A-Za-z0-9_-]*$/;

/**
 * The bytes of unpadded base64url text, or `undefined` unless the text is the one spelling of those
 * bytes (as `base64UrlDecode` demands: alphabet, no padding, no length 4k+1, zero unused bits).
 * Node's native decoder skips what it does not know, so the alphabet is checked first and the result
 * re-encoded and compared; both are native and cheaper than decoding in JavaScript on every payment.
 */
function strictBase64UrlBytes(text: string): Buffer | undefined {
  if (text.length % 4 === 1 || !BASE64URL_TEXT.test(text)) return undefined;
  const bytes = Buffer.from(text, "base64url");
  return bytes.toString("base64url") === text ? bytes : undefined;
}

export type OpenedMemo = { ok: true; payload: MemoPayload } | { ok: false; reason: string };

/**
 * Checks a memo's HMAC and parses its payload. Never throws: a memo is untrusted input.
 * The MAC is checked over the exact bytes received before the JSON is parsed, so a forged memo costs
 * one HMAC and nothing more.
 */
export function openMemo(secret: MemoSecret, memo: string): OpenedMemo {
  if (typeof memo !== "string") return { ok: false, reason: "memo is not a string" };
  const dot = memo.indexOf(".");
  if (dot <= 0 || dot !== memo.lastIndexOf(".")) return { ok: false, reason: "memo is not two parts" };
  const json = strictBase64UrlBytes(memo.slice(0, dot));
  const tag = strictBase64UrlBytes(memo.slice(dot + 1));
  if (json === undefined || tag === undefined) return { ok: false, reason: "memo is not base64url" };
  const expected = memoMac(secret, json);
  if (tag.length !== expected.length || !timingSafeEqual(tag, expected)) {
    return { ok: false, reason: "memo was not issued by this gate" };
  }
  let value: unknown;
  try {
    value = JSON.parse(utf8Decode(json));
  } catch {
    return { ok: false, reason: "memo payload is not JSON" };
  }
  const fast = fastMemoPayload(value);
  if (fast !== undefined) return { ok: true, payload: fast };
  const parsed = MemoPayloadSchema.safeParse(value);
  if (!parsed.success) return { ok: false, reason: "memo payload has the wrong shape" };
  return { ok: true, payload: parsed.data };
}

const MEMO_FIELDS = new Set(["m", "p", "q", "a", "t", "n", "k", "e", "r"]);
const METHOD = /^[A-Z]{1,16}$/;
const PATH = /^\/[\x21\x23-\x5b\x5d-\x7e]*$/;
const QUERY_HASH = /^[A-Za-z0-9_-]{22}$/;
const RANDOM = /^[A-Za-z0-9_-]{16}$/;
const ATOMIC = /^(0|[1-9][0-9]*)$/;

/**
 * The payload `MemoPayloadSchema` would give for `value`, when hand-written checks accept it (every
 * memo a gate writes for an amount under 2^53); `undefined` leaves the verdict to the schema.
 */
function fastMemoPayload(value: unknown): MemoPayload | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const o = value as Record<string, unknown>;
  let fields = 0;
  for (const key in o) {
    if (!MEMO_FIELDS.has(key)) return undefined;
    fields++;
  }
  const { m, p, q, a, n, e, r } = o;
  if (fields !== (q === undefined ? MEMO_FIELDS.size - 1 : MEMO_FIELDS.size)) return undefined;
  if (typeof m !== "string" || !METHOD.test(m)) return undefined;
  if (typeof p !== "string" || p.length > 1024 || !PATH.test(p)) return undefined;
  if (q !== undefined && (typeof q !== "string" || !QUERY_HASH.test(q))) return undefined;
  if (typeof a !== "string" || a.length > 15 || !ATOMIC.test(a)) return undefined;
  if (!isNetwork(n)) return undefined;
  if (typeof e !== "number" || !Number.isSafeInteger(e) || e <= 0) return undefined;
  if (typeof r !== "string" || !RANDOM.test(r)) return undefined;
  const t = checksummedAddress(o.t);
  const k = checksummedAddress(o.k);
  if (t === undefined || k === undefined) return undefined;
  return q === undefined ? { m, p, a, t, n, k, e, r } : { m, p, q, a, t, n, k, e, r };
}
