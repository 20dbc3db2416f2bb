/**
 * The toy scheme's credential: a ticket `base64url(json) + "." + base64url(hmacSha256(secret, json))`
 * where json = `{ p: payer, a: amount, m: method, u: path, n: nonce }`. Buyer and seller share the
 * secret (a prepaid account at a toy bank): enough to show every step of a scheme, nothing to deploy.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import { base64UrlDecode, base64UrlEncode, utf8Decode } from "../../../src/protocol/base64.ts";

export const TOY_TICKET_HEADER = "x-toy-ticket";

export const ToyTicketSchema = z.strictObject({
  p: z.string().regex(/^0x[0-9a-fA-F]{40}$/),
  a: z.string().regex(/^[0-9]{1,30}$/),
  m: z.string().max(16),
  u: z.string().max(1024),
  n: z.string().regex(/^[0-9a-f]{32}$/),
});
export type ToyTicket = z.infer<typeof ToyTicketSchema>;

const mac = (secret: Uint8Array, text: string) => createHmac("sha256", secret).update(text).digest();

export function signToyTicket(secret: Uint8Array, ticket: ToyTicket): string {
  const json = JSON.stringify(ticket);
  return `${base64UrlEncode(json)}.${base64UrlEncode(mac(secret, json))}`;
}

/** The ticket, or why it is not one; never throws. */
export function openToyTicket(
  secret: Uint8Array,
  text: string,
): { ok: true; ticket: ToyTicket } | { ok: false; reason: string } {
  const [body, sig, rest] = text.split(".");
  if (body === undefined || sig === undefined || rest !== undefined || text.length > 2048) {
    return { ok: false, reason: "malformed ticket" };
  }
  let json: string;
  let given: Uint8Array;
  try {
    json = utf8Decode(base64UrlDecode(body));
    given = base64UrlDecode(sig);
  } catch {
    return { ok: false, reason: "malformed ticket" };
  }
  const expected = mac(secret, json);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return { ok: false, reason: "ticket not signed by the toy bank" };
  }
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return { ok: false, reason: "malformed ticket" };
  }
  const parsed = ToyTicketSchema.safeParse(value);
  return parsed.success ? { ok: true, ticket: parsed.data } : { ok: false, reason: "malformed ticket" };
}
