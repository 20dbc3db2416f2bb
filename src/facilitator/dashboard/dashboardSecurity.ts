/**
 * The dashboard's browser-facing defences (docs/dashboard.md "Threat model"):
 * - every response: a strict Content-Security-Policy (scripts and styles only from our own files, no
 *   inline script, no framing), `X-Content-Type-Options`, `Referrer-Policy: same-origin` (with `no-referrer` a browser sends
 *   `Origin: null` on a form post, which the origin check must refuse), no caching;
 * - every state-changing request: same-origin (`Sec-Fetch-Site` and `Origin`, when the browser sends
 *   them, must say so) and the session's CSRF token in the form, compared in constant time.
 */
import { timingSafeEqual } from "node:crypto";
import type { Context, MiddlewareHandler } from "hono";
import { TollgateError } from "../../protocol/errors.ts";

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** Sets the dashboard's security headers on every response. */
export function dashboardHeaders(): MiddlewareHandler {
  return async function dashboardHeaders(c, next) {
    await next();
    c.res.headers.set("content-security-policy", CONTENT_SECURITY_POLICY);
    c.res.headers.set("x-content-type-options", "nosniff");
    c.res.headers.set("x-frame-options", "DENY");
    c.res.headers.set("referrer-policy", "same-origin");
    c.res.headers.set("cross-origin-opener-policy", "same-origin");
    c.res.headers.set("cross-origin-resource-policy", "same-origin");
    if (!c.res.headers.has("cache-control")) c.res.headers.set("cache-control", "no-store");
  };
}

/**
 * Refuses a cross-site request: `Sec-Fetch-Site` other than `same-origin` (or `none`, a navigation
 * the user typed), or an `Origin` that is not the dashboard's own. Clients that send neither (curl)
 * still need the CSRF token, which only a page of the session holds.
 */
export function assertSameOrigin(c: Context, publicOrigin: string | undefined): void {
  const site = c.req.header("sec-fetch-site");
  if (site !== undefined && site !== "same-origin" && site !== "none") {
    throw new TollgateError("Forbidden", "cross-site requests are refused", {
      details: { reason: "cross_site", secFetchSite: site },
    });
  }
  const origin = c.req.header("origin");
  if (origin !== undefined) {
    const own = publicOrigin ?? new URL(c.req.url).origin;
    if (origin !== own) {
      throw new TollgateError("Forbidden", "cross-origin requests are refused", {
        details: { reason: "cross_origin" },
      });
    }
  }
}

/** Constant-time comparison of a submitted token with the expected one. */
export function tokensMatch(given: unknown, expected: string): boolean {
  if (typeof given !== "string" || given.length !== expected.length) return false;
  return timingSafeEqual(Buffer.from(given, "utf8"), Buffer.from(expected, "utf8"));
}

/** Throws 403 unless the form carries the expected CSRF token. */
export function assertCsrf(form: Record<string, unknown>, expected: string): void {
  if (!tokensMatch(form._csrf, expected)) {
    throw new TollgateError("Forbidden", "the form's CSRF token is missing or wrong; reload the page", {
      details: { reason: "csrf" },
    });
  }
}
