/**
 * Who may read `GET /metrics`. The metrics carry settled volume per token, failure counts and request
 * rates: a business's revenue, not something to show the network.
 *
 * - With a `token` (`TOLLGATE_METRICS_TOKEN`), a scraper must send `Authorization: Bearer <token>`,
 *   from any address, loopback included (a reverse proxy on the same host would otherwise make every
 *   stranger look local).
 * - Without one (the default), only a peer on the loopback interface is answered, and only when the
 *   request carries no `Forwarded` / `X-Forwarded-For` / `X-Real-IP` header: such a request came
 *   through a proxy, whose own socket is local but whose client is not. A Prometheus on the same host
 *   works with no configuration; anything else needs the token.
 *
 * The peer address comes from the Node server's socket (`@hono/node-server` puts the request in
 * `c.env.incoming`); where there is none (another runtime, `app.request()` in tests) the peer counts as
 * remote, so the check fails closed.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { Context } from "hono";
import { TollgateError } from "../protocol/errors.ts";

export type MetricsAccess = {
  /** Bearer token a scraper must present; when set it is required from every address. */
  token?: string | undefined;
};

/** Headers a reverse proxy adds: their presence means the socket's peer is not the client. */
const FORWARDING_HEADERS = ["forwarded", "x-forwarded-for", "x-real-ip"] as const;

/** Throws `Unauthorized` unless the request may read the metrics. */
export function assertMetricsReader(c: Context, access: MetricsAccess): void {
  if (access.token !== undefined) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "");
    if (match !== null && sameSecret(match[1] ?? "", access.token)) return;
    throw new TollgateError("Unauthorized", "send the metrics token as `Authorization: Bearer <token>`");
  }
  const forwarded = FORWARDING_HEADERS.some((name) => c.req.header(name) !== undefined);
  if (!forwarded && isLoopback(peerAddress(c))) return;
  throw new TollgateError(
    "Unauthorized",
    "metrics are served to loopback peers only; set TOLLGATE_METRICS_TOKEN to scrape from elsewhere",
  );
}

/** Whether the request may read the metrics (and the figures `/healthz` gives a metrics reader). */
export function isMetricsReader(c: Context, access: MetricsAccess): boolean {
  try {
    assertMetricsReader(c, access);
    return true;
  } catch {
    return false;
  }
}

/** The socket peer's address under @hono/node-server, or `undefined` when there is no socket. */
function peerAddress(c: Context): string | undefined {
  const env = c.env as { incoming?: { socket?: { remoteAddress?: unknown } } } | undefined;
  const address = env?.incoming?.socket?.remoteAddress;
  return typeof address === "string" ? address : undefined;
}

/** 127.0.0.0/8, ::1, and IPv4 loopback mapped into IPv6. */
export function isLoopback(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith("::ffff:") ? address.slice("::ffff:".length) : address;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4) || address === "::1";
}

function sameSecret(given: string, expected: string): boolean {
  const digest = (text: string) => createHash("sha256").update(text, "utf8").digest();
  return timingSafeEqual(digest(given), digest(expected));
}
