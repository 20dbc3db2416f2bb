/**
 * The default transport of webhook deliveries: one HTTP(S) request to the address the target policy
 * checked (see webhookTargets.ts), never to a second resolution of the host name. The name still goes
 * in the `Host` header and, for https, in SNI and the certificate check, so a receiver behind a shared
 * IP or a CDN works as usual.
 *
 * Redirects are not followed (node's `http.request` never follows them): a 3xx is a failed attempt.
 * The response body is never read: the status line is all a delivery records.
 */
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import type { LookupFunction } from "node:net";
import type { CheckedWebhookTarget } from "../../http/webhookTargets.ts";

/** Sends one delivery to a checked target; answers with the status line (the body is discarded). */
export type WebhookFetch = (
  url: string,
  init: RequestInit,
  target: CheckedWebhookTarget,
) => Promise<Response>;

export const pinnedWebhookFetch: WebhookFetch = (_url, init, target) =>
  new Promise<Response>((resolve, reject) => {
    const { address, family } = target.address;
    // net.connect asks this for the name's addresses; it only ever gets the checked one. (With
    // autoSelectFamily it asks for `all`, and wants an array.)
    const lookup: LookupFunction = (_hostname, options, callback) => {
      if ((options as { all?: boolean }).all === true) {
        (callback as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [
          { address, family },
        ]);
      } else {
        callback(null, address, family);
      }
    };
    const send = target.url.protocol === "https:" ? httpsRequest : httpRequest;
    const headers = new Headers(init.headers);
    const body = typeof init.body === "string" ? init.body : "";
    headers.set("content-length", String(Buffer.byteLength(body)));
    const req = send(
      target.url,
      {
        method: init.method ?? "POST",
        headers: Object.fromEntries(headers),
        lookup,
        signal: init.signal ?? undefined,
        // One request per connection: a kept-alive socket would outlive the check it was made for.
        agent: false,
      },
      (res: IncomingMessage) => {
        // The body is of no interest (and may be large or hostile): drop it and the connection.
        res.destroy();
        const status = res.statusCode ?? 0;
        if (status < 200 || status > 599) {
          reject(new Error(`invalid HTTP status ${status}`));
          return;
        }
        resolve(new Response(null, { status, statusText: sanitizeStatusText(res.statusMessage ?? "") }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });

/** A reason phrase as it may be stored: printable ASCII, at most 64 characters. */
export function sanitizeStatusText(text: string): string {
  return text
    .replace(/[^\x20-\x7e]+/g, " ")
    .trim()
    .slice(0, 64);
}
