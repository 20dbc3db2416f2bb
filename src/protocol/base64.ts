/**
 * Strict base64 (RFC 4648 §4) and base64url (§5) codecs, written out rather than borrowed from
 * `Buffer`, whose decoder silently skips characters outside the alphabet. Runs wherever a gate runs.
 *
 * Decoding is strict so that every byte string has exactly one accepted text: characters outside the
 * alphabet, a length of 4k+1, misplaced padding and non-zero unused bits (RFC 4648 §3.5) are refused
 * with `InvalidEncoding`. Memos and signatures are compared as text, so a second spelling of the
 * same bytes would be a second memo.
 */
import { TollgateError } from "./errors.ts";

const STANDARD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

function reverseTable(alphabet: string): Int8Array {
  const table = new Int8Array(128).fill(-1);
  for (let i = 0; i < alphabet.length; i++) table[alphabet.charCodeAt(i)] = i;
  return table;
}
const STANDARD_VALUES = reverseTable(STANDARD);
const URL_SAFE_VALUES = reverseTable(URL_SAFE);

const utf8Encoder = new TextEncoder();
// `fatal`: invalid UTF-8 is an encoding fault, not something to paper over with U+FFFD.
const utf8Decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** UTF-8 bytes of a string (lone surrogates become U+FFFD, as `TextEncoder` defines). */
export function utf8Encode(text: string): Uint8Array {
  return utf8Encoder.encode(text);
}

/** The string of UTF-8 bytes. Throws `InvalidEncoding` for byte sequences that are not UTF-8. */
export function utf8Decode(bytes: Uint8Array): string {
  try {
    return utf8Decoder.decode(bytes);
  } catch (cause) {
    throw new TollgateError("InvalidEncoding", "bytes are not valid UTF-8", { cause });
  }
}

function toBytes(input: Uint8Array | string): Uint8Array {
  return typeof input === "string" ? utf8Encode(input) : input;
}

function encode(bytes: Uint8Array, alphabet: string, pad: boolean): string {
  let out = "";
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += alphabet[n >> 18]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]! + alphabet[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += alphabet[n >> 18]! + alphabet[(n >> 12) & 63]! + (pad ? "==" : "");
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += alphabet[n >> 18]! + alphabet[(n >> 12) & 63]! + alphabet[(n >> 6) & 63]! + (pad ? "=" : "");
  }
  return out;
}

function decode(text: string, values: Int8Array, allowPadding: boolean, name: string): Uint8Array {
  const refuse = (reason: string): never => {
    throw new TollgateError("InvalidEncoding", `invalid ${name}: ${reason}`);
  };
  if (typeof text !== "string") return refuse("not text");
  let end = text.length;
  if (allowPadding && end % 4 === 0 && end > 0) {
    // Padding is optional, but when present it completes the last quantum: one or two `=`.
    if (text.charCodeAt(end - 1) === 61) end--;
    if (text.charCodeAt(end - 1) === 61) end--;
  }
  if (end % 4 === 1) return refuse("impossible length");
  const out = new Uint8Array(Math.floor((end * 3) / 4));
  let buffer = 0;
  let bits = 0;
  let o = 0;
  for (let i = 0; i < end; i++) {
    const code = text.charCodeAt(i);
    const value = code < 128 ? values[code]! : -1;
    if (value < 0) return refuse(`character outside the alphabet at ${i}`);
    buffer = ((buffer << 6) | value) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (buffer >> bits) & 0xff;
    }
  }
  if ((buffer & ((1 << bits) - 1)) !== 0) return refuse("non-zero unused bits");
  return out;
}

/** Standard base64 with `=` padding. Strings are encoded as their UTF-8 bytes. */
export function base64Encode(input: Uint8Array | string): string {
  return encode(toBytes(input), STANDARD, true);
}

/** Strict standard base64; padding optional but, if present, correct. Throws `InvalidEncoding`. */
export function base64Decode(text: string): Uint8Array {
  return decode(text, STANDARD_VALUES, true, "base64");
}

/** base64url without padding (RFC 4648 §5, as JWS uses it). Strings are encoded as their UTF-8 bytes. */
export function base64UrlEncode(input: Uint8Array | string): string {
  return encode(toBytes(input), URL_SAFE, false);
}

/**
 * Strict base64url without padding: `=` is outside the URL-safe alphabet and refused, so the
 * same bytes never appear under two spellings. Throws `InvalidEncoding`.
 */
export function base64UrlDecode(text: string): Uint8Array {
  return decode(text, URL_SAFE_VALUES, false, "base64url");
}
