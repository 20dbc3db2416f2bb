/**
 * A small typed HTTP client for the facilitator (docs/facilitator.md). Gates and payers talk to the
 * facilitator only through this, so every reply is zod-checked in one place and every failure becomes
 * a `TollgateError` whose `code` a caller can branch on.
 *
 * Failure mapping (docs/protocol.md, "Errors"):
 * - an error body `{ error: { code, message, details? } }` becomes that code, with `retryAfter` from
 *   the `Retry-After` header;
 * - a non-2xx reply without a readable error body becomes the code of its status (429 `RateLimited`,
 *   502/503/504 `ChainUnavailable`, 400 `InvalidRequest`, 401 `Unauthorized`, 404 `NotFound`,
 *   413 `PayloadTooLarge`, 402 `InsufficientFunds`, 409 `NonceAlreadyUsed`, anything else `Internal`);
 * - the facilitator being unreachable or too slow becomes `ChainUnavailable` with
 *   `details.reason` `"facilitator_unreachable"` or `"facilitator_timeout"`: to the caller the
 *   settlement path is down either way, and both are worth retrying later;
 * - a 2xx reply that fails its schema becomes `Internal` with `details.reason`
 *   `"facilitator_bad_reply"`: the peer is broken, retrying will not help.
 *
 * Several instances (docs/reliability.md): with `fallbackUrls`, a request that could not reach an
 * instance (connection refused, no route, name not found: nothing was sent) goes to the next one. A
 * request that may have been processed (a 503, a timeout, a connection cut after sending) goes to the
 * next instance only when it is idempotent — reads, `/verify`, and `/authorize`, which the facilitator
 * answers once per authorization nonce whichever instance is asked — never for relayed calls, usage or
 * account changes, which would run twice. The client starts at the instance that answered last.
 */
import type { z } from "zod";
import { TollgateError } from "../protocol/errors.ts";
import {
  type AuthorizeResponse,
  AuthorizeResponseSchema,
  type Jwks,
  JwksSchema,
  type SupportedResponse,
  SupportedResponseSchema,
  type VerifyResponse,
  VerifyResponseSchema,
} from "../protocol/facilitator.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";
import type { SignedPayment } from "../protocol/signedPayment.ts";
import { requireObject } from "./checkInput.ts";
import { parseReply, type ReplyPeer, readReplyText, unansweredError } from "./replyErrors.ts";

// Part of the facilitator client's surface: the payer's entry point exports it from here.
export { parseRetryAfter } from "./replyErrors.ts";

/** The `fetch` the client sends with: the global one, or anything with its signature. */
export type FetchFn = (input: Request | string | URL, init?: RequestInit) => Promise<Response>;

export type FacilitatorClientOptions = {
  /** Base URL of the facilitator, e.g. `http://127.0.0.1:4020` (a path prefix is kept). */
  url: string;
  fetch: FetchFn;
  /** Abort a request that has not completed after this long (default 30 000 ms: settlement waits for a block). */
  timeoutMs?: number;
  /** Extra headers on every request, e.g. a provider's `Authorization`. */
  headers?: Record<string, string>;
  /** Base URLs of further instances of the same facilitator (one shared store), tried after `url`. */
  fallbackUrls?: readonly string[];
};

export type RequestOptions = {
  signal?: AbortSignal | undefined;
  /** Overrides the client's `timeoutMs` for this request. */
  timeoutMs?: number | undefined;
  headers?: Record<string, string> | undefined;
};

export type FacilitatorClient = {
  /** The base URL as configured (no trailing slash), as gates advertise it in `tollgate.facilitator`. */
  readonly url: string;
  /** `POST /authorize`: settle a signed payment and get its proof. Idempotent on the authorization nonce. */
  authorize(signedPayment: SignedPayment, options?: RequestOptions): Promise<AuthorizeResponse>;
  /** `POST /verify`: ask the facilitator whether a proof is its own and still valid. */
  verify(proof: PaymentProof, options?: RequestOptions): Promise<VerifyResponse>;
  /** `GET /.well-known/jwks.json`: the Ed25519 keys proofs are signed with. */
  jwks(options?: RequestOptions): Promise<Jwks>;
  /** `GET /supported`: networks, tokens (with their EIP-712 domains) and contracts. */
  supported(options?: RequestOptions): Promise<SupportedResponse>;
  /**
   * Any other endpoint (subscriptions, usage, webhooks): sends `body` as JSON when given and parses
   * a 2xx reply with `schema`, failing exactly as the named methods do.
   */
  request<T>(
    method: string,
    path: string,
    schema: z.ZodType<T>,
    options?: RequestOptions & { body?: unknown },
  ): Promise<T>;
};

const DEFAULT_TIMEOUT_MS = 30_000;

const FACILITATOR: ReplyPeer = {
  name: "facilitator",
  codeByStatus: {
    400: "InvalidRequest",
    401: "Unauthorized",
    402: "InsufficientFunds",
    404: "NotFound",
    409: "NonceAlreadyUsed",
    413: "PayloadTooLarge",
    429: "RateLimited",
    502: "ChainUnavailable",
    503: "ChainUnavailable",
    504: "ChainUnavailable",
  },
  // Proofs, JWKS and catalogues are a few KiB.
  maxReplyBytes: 1024 * 1024,
};

/** Where and how a client reaches its facilitator's instances. */
type FacilitatorConnection = {
  /** Base URLs of the instances, `url` first. */
  bases: string[];
  fetchFn: FetchFn;
  timeoutMs: number;
  defaultHeaders: Record<string, string>;
  /** The instance tried first: the one that answered last. */
  preferred: number;
};

/** Refuses anything but a facilitator client (`createFacilitatorClient`, or an object with `request`). */
export function requireFacilitator(
  value: unknown,
  usage: string,
): asserts value is Pick<FacilitatorClient, "request"> {
  requireObject(value, usage);
  if (typeof (value as { request?: unknown }).request !== "function") {
    throw new TollgateError("InvalidRequest", usage, { details: { got: "an object without request()" } });
  }
}

/**
 * A client for one facilitator.
 *
 * @example
 * const facilitator = createFacilitatorClient({ url: "http://127.0.0.1:4020", fetch });
 * const { proof } = await facilitator.authorize(signedPayment);
 */
export function createFacilitatorClient(options: FacilitatorClientOptions): FacilitatorClient {
  const connection = connect(options);
  const request: FacilitatorClient["request"] = (method, path, schema, requestOptions) =>
    requestWithFailover(connection, method, path, schema, requestOptions);
  return {
    url: connection.bases[0]!,
    authorize: (signedPayment, o) =>
      request("POST", "/authorize", AuthorizeResponseSchema, { ...o, body: { signedPayment } }),
    verify: (proof, o) => request("POST", "/verify", VerifyResponseSchema, { ...o, body: { proof } }),
    jwks: (o) => request("GET", "/.well-known/jwks.json", JwksSchema, o),
    supported: (o) => request("GET", "/supported", SupportedResponseSchema, o),
    request,
  };
}

/** The client's options checked: its instances' base URLs, its fetch, timeout and headers. */
function connect(options: FacilitatorClientOptions): FacilitatorConnection {
  requireObject(options, "createFacilitatorClient({ url, fetch, timeoutMs?, headers? })");
  if (typeof options.fetch !== "function") {
    throw new TollgateError("InvalidRequest", "createFacilitatorClient: fetch must be a function");
  }
  if (options.fallbackUrls !== undefined && !Array.isArray(options.fallbackUrls)) {
    throw new TollgateError("InvalidRequest", "facilitator fallbackUrls must be an array of URLs");
  }
  const bases = [options.url, ...(options.fallbackUrls ?? [])].map(parseBaseUrl);
  if (typeof options.fetch !== "function") {
    throw new TollgateError("InvalidRequest", "createFacilitatorClient needs a `fetch` function");
  }
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs <= 0) {
    throw new TollgateError("InvalidRequest", "facilitator timeoutMs must be a positive integer", {
      details: { timeoutMs },
    });
  }
  return { bases, fetchFn: options.fetch, timeoutMs, defaultHeaders: options.headers ?? {}, preferred: 0 };
}

/** One request, sent to the next instance while it may be (see the header), starting at the preferred one. */
async function requestWithFailover<T>(
  connection: FacilitatorConnection,
  method: string,
  path: string,
  schema: z.ZodType<T>,
  requestOptions: RequestOptions & { body?: unknown } = {},
): Promise<T> {
  const relative = path.startsWith("/") ? path : `/${path}`;
  const idempotent = isIdempotent(method, relative);
  const { bases } = connection;
  const start = connection.preferred;
  for (let i = 0; ; i++) {
    const index = (start + i) % bases.length;
    try {
      const result = await requestOnce(connection, bases[index]!, method, relative, schema, requestOptions);
      connection.preferred = index;
      return result;
    } catch (error) {
      const last = i === bases.length - 1;
      if (last || requestOptions.signal?.aborted === true || !mayTryNext(error, idempotent)) throw error;
    }
  }
}

/** One request to the instance at `base`: its reply checked against `schema`, or the error it stands for. */
async function requestOnce<T>(
  connection: FacilitatorConnection,
  base: string,
  method: string,
  path: string,
  schema: z.ZodType<T>,
  requestOptions: RequestOptions & { body?: unknown },
): Promise<T> {
  const target = `${base}${path}`;
  const timeoutMs = requestOptions.timeoutMs ?? connection.timeoutMs;
  const timeout = AbortSignal.timeout(timeoutMs);
  const signal =
    requestOptions.signal === undefined ? timeout : AbortSignal.any([requestOptions.signal, timeout]);
  const headers: Record<string, string> = { accept: "application/json", ...connection.defaultHeaders };
  Object.assign(headers, requestOptions.headers);
  const init: RequestInit = { method, headers, signal };
  if (requestOptions.body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(requestOptions.body);
  }

  let response: Response;
  let text: string;
  try {
    // Called bare, as the global fetch must be (not as a method of the connection).
    const { fetchFn } = connection;
    response = await fetchFn(target, init);
    text = await readReplyText(FACILITATOR, response, target);
  } catch (cause) {
    // The caller's own abort is the caller's business: let it through untouched.
    if (requestOptions.signal?.aborted === true) throw cause;
    if (cause instanceof TollgateError) throw cause;
    const timedOut = timeout.aborted;
    const notSent = !timedOut && isConnectFailure(cause);
    throw unansweredError(FACILITATOR, { url: target, timedOut, timeoutMs, notSent, cause });
  }
  return parseReply(FACILITATOR, { method, path, url: target }, { response, text }, schema);
}

function parseBaseUrl(text: unknown): string {
  let base: URL;
  try {
    base = new URL(String(text));
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `facilitator url is not a URL: ${String(text)}`, { cause });
  }
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw new TollgateError("InvalidRequest", "facilitator url must be http(s)", { details: { url: text } });
  }
  return base.href.replace(/\/+$/, "");
}

/**
 * Requests that may run twice with one effect: reads, proof checks, and `/authorize`, which the
 * facilitator settles once per authorization nonce and answers with the same proof (docs/facilitator.md).
 */
function isIdempotent(method: string, path: string): boolean {
  const upper = method.toUpperCase();
  if (upper === "GET" || upper === "HEAD") return true;
  const bare = path.split("?")[0];
  return upper === "POST" && (bare === "/authorize" || bare === "/verify" || bare === "/x402/verify");
}

/** Socket errors raised before a request could be sent: no instance saw it. */
const connectFailureCodes = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

/** Whether `cause` (fetch's error and its causes) says the connection was never made. */
function isConnectFailure(cause: unknown): boolean {
  for (let e: unknown = cause, depth = 0; e !== null && typeof e === "object" && depth < 5; depth++) {
    const { code, errors } = e as { code?: unknown; errors?: unknown };
    if (typeof code === "string" && connectFailureCodes.has(code)) return true;
    // Happy eyeballs: every address refused.
    if (Array.isArray(errors) && errors.length > 0 && errors.every((inner) => isConnectFailure(inner)))
      return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** Whether a failed request may go to the next instance (see the header). */
function mayTryNext(error: unknown, idempotent: boolean): boolean {
  if (!(error instanceof TollgateError) || error.code !== "ChainUnavailable") return false;
  // Nothing was sent: safe for any request. Otherwise (a 502/503/504, a timeout, a cut connection)
  // the instance may have acted on it: only an idempotent request may be sent again.
  return error.details?.notSent === true || idempotent;
}

/** Whether two facilitator base URLs name the same service (case of scheme/host and trailing slashes aside). */
export function sameFacilitatorUrl(a: string, b: string): boolean {
  const normalize = (url: string) => {
    try {
      return new URL(url).href.replace(/\/+$/, "");
    } catch {
      return url;
    }
  };
  return normalize(a) === normalize(b);
}
