/**
 * How Tollgate's HTTP clients (the facilitator's, the market's) read a peer's reply and turn what went
 * wrong into a `TollgateError` (docs/protocol.md, "Errors"). Each client names its peer and its own
 * map from status to code; the mapping is otherwise one:
 * - an error body `{ error: { code, message, details? } }` becomes that code, with `retryAfter` from
 *   the `Retry-After` header;
 * - a non-2xx reply without a readable error body becomes the code of its status (`Internal` when the
 *   client's map has none), with the status, URL and the body's first 200 characters;
 * - a 2xx reply that fails its schema, or a reply over the size bound, becomes `Internal` with
 *   `details.reason` `"<peer>_bad_reply"`: the peer is broken, retrying will not help;
 * - a peer that did not answer becomes `ChainUnavailable` with `details.reason` `"<peer>_timeout"` or
 *   `"<peer>_unreachable"`: both are worth retrying later.
 * Every message names the URL tried (its user name and password left out), so a payer or an operator
 * sees which server was down or broken without reading `details.url`.
 */
import type { z } from "zod";
import { ErrorBodySchema, type ErrorCode, errorFromBody, TollgateError } from "../protocol/errors.ts";
import { HeaderName } from "../protocol/header.ts";
import { summarizeIssues } from "../protocol/parseWire.ts";
import { readBoundedText } from "./readBoundedText.ts";

/** The server a client talks to, as its replies' errors name and read it. */
export type ReplyPeer = {
  /** How messages and `details.reason` name the peer (`"facilitator"`, `"market"`). */
  name: string;
  /** The code of a non-2xx reply without a readable error body, by status; any other is `Internal`. */
  codeByStatus: Readonly<Record<number, ErrorCode>>;
  /** Largest reply body read: a hostile peer gets cut off. */
  maxReplyBytes: number;
};

/** The request a reply answers, as its errors name it. */
export type ReplyRequest = { method: string; path: string; url: string };

/** `Retry-After` in delta-seconds (the form Tollgate's servers send); an HTTP date is ignored. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || !/^\s*\d{1,9}\s*$/.test(value)) return undefined;
  return Number(value.trim());
}

/**
 * A reply's text, refusing bodies over the peer's `maxReplyBytes` without buffering them whole. `url`
 * is the URL asked (default the response's own, which a hand-built `Response` leaves empty).
 */
export function readReplyText(peer: ReplyPeer, response: Response, url = response.url): Promise<string> {
  // A stand-in response object may carry no url at all.
  const known = typeof url === "string" && url !== "";
  const from = known ? ` from ${displayUrl(url)}` : "";
  return readBoundedText(
    response,
    peer.maxReplyBytes,
    () =>
      new TollgateError("Internal", `${peer.name} reply${from} is over ${peer.maxReplyBytes} bytes`, {
        details: { reason: `${peer.name}_bad_reply`, ...(known ? { url } : {}) },
      }),
  );
}

/** `url` as messages show it: without a user name or password, which belong in no log line. */
function displayUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.username === "" && parsed.password === "") return url;
    parsed.username = "";
    parsed.password = "";
    return parsed.href;
  } catch {
    return url;
  }
}

/** Node's socket error codes in words, for the parenthesis after "is unreachable". */
const FAILURE_BY_CODE: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  EPIPE: "connection reset",
  UND_ERR_SOCKET: "connection closed",
  UND_ERR_CLOSED: "connection closed",
  ENOTFOUND: "host not found",
  EAI_AGAIN: "host name lookup failed",
  EHOSTUNREACH: "no route to host",
  ENETUNREACH: "network unreachable",
  ETIMEDOUT: "connection timed out",
  UND_ERR_CONNECT_TIMEOUT: "connection timed out",
};

/**
 * What `cause` (fetch's error and its causes) says went wrong, in a few words, or `undefined` when it
 * says nothing more than undici's bare "fetch failed".
 */
function failureOf(cause: unknown): string | undefined {
  let message: string | undefined;
  for (let e: unknown = cause, depth = 0; e !== null && typeof e === "object" && depth < 5; depth++) {
    const { code, errors, message: text } = e as { code?: unknown; errors?: unknown; message?: unknown };
    if (typeof code === "string") return FAILURE_BY_CODE[code] ?? code;
    if (typeof text === "string" && text !== "" && text !== "fetch failed") message ??= text;
    // Happy eyeballs: every address failed, the first says how.
    e = Array.isArray(errors) && errors.length > 0 ? errors[0] : (e as { cause?: unknown }).cause;
  }
  return message;
}

/**
 * The error for a request the peer did not answer: it timed out after `timeoutMs`, or never reached
 * it (`notSent` when the connection was never made, so no instance saw the request).
 */
export function unansweredError(
  peer: ReplyPeer,
  fault: { url: string; timedOut: boolean; timeoutMs: number; notSent?: boolean; cause: unknown },
): TollgateError {
  const { timedOut } = fault;
  const at = `${peer.name} at ${displayUrl(fault.url)}`;
  const failure = timedOut ? undefined : failureOf(fault.cause);
  return new TollgateError(
    "ChainUnavailable",
    timedOut
      ? `${at} did not answer within ${fault.timeoutMs} ms`
      : `${at} is unreachable${failure === undefined ? "" : ` (${failure})`}`,
    {
      details: {
        reason: timedOut ? `${peer.name}_timeout` : `${peer.name}_unreachable`,
        url: fault.url,
        ...(fault.notSent === true ? { notSent: true } : {}),
      },
      cause: fault.cause,
    },
  );
}

/** A reply read whole: a 2xx one parsed with `schema`, any other thrown as the error it stands for. */
export function parseReply<T>(
  peer: ReplyPeer,
  request: ReplyRequest,
  reply: { response: Response; text: string },
  schema: z.ZodType<T>,
): T {
  const { response, text } = reply;
  let json: unknown;
  let isJson = true;
  try {
    json = JSON.parse(text);
  } catch {
    isJson = false;
  }
  if (!response.ok) throw replyError(peer, request, response, isJson ? json : undefined, text);
  const parsed = isJson ? schema.safeParse(json) : undefined;
  if (parsed?.success !== true) {
    throw new TollgateError(
      "Internal",
      `${peer.name} sent a malformed reply to ${request.method} ${displayUrl(request.url)}`,
      {
        details: {
          reason: `${peer.name}_bad_reply`,
          url: request.url,
          ...(parsed === undefined
            ? { body: text.slice(0, 200) }
            : { issues: summarizeIssues(parsed.error.issues) }),
        },
      },
    );
  }
  return parsed.data;
}

/** A non-2xx reply as an error: its error body's code, else its status's. */
function replyError(
  peer: ReplyPeer,
  request: ReplyRequest,
  response: Response,
  json: unknown,
  text: string,
): TollgateError {
  const retryAfter = parseRetryAfter(response.headers.get(HeaderName.RetryAfter));
  const body = json === undefined ? undefined : ErrorBodySchema.safeParse(json);
  if (body?.success === true) return errorFromBody(body.data, { retryAfter });
  const code = peer.codeByStatus[response.status] ?? "Internal";
  return new TollgateError(
    code,
    `${peer.name} answered ${response.status} to ${request.method} ${displayUrl(request.url)}`,
    {
      details: { status: response.status, url: request.url, body: text.slice(0, 200) },
      retryAfter,
    },
  );
}
