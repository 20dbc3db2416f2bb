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

/** A reply's text, refusing bodies over the peer's `maxReplyBytes` without buffering them whole. */
export function readReplyText(peer: ReplyPeer, response: Response): Promise<string> {
  return readBoundedText(
    response,
    peer.maxReplyBytes,
    () =>
      new TollgateError("Internal", `${peer.name} reply is over ${peer.maxReplyBytes} bytes`, {
        details: { reason: `${peer.name}_bad_reply` },
      }),
  );
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
  return new TollgateError(
    "ChainUnavailable",
    timedOut ? `${peer.name} did not answer within ${fault.timeoutMs} ms` : `${peer.name} is unreachable`,
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
      `${peer.name} sent a malformed reply to ${request.method} ${request.path}`,
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
    `${peer.name} answered ${response.status} ${request.method} ${request.path}`,
    {
      details: { status: response.status, url: request.url, body: text.slice(0, 200) },
      retryAfter,
    },
  );
}
