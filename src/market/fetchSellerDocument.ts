/**
 * How the market reads a seller's discovery document (`<baseUrl>/.well-known/tollgate.json`), for
 * refresh and liveness checks. Sellers choose their `baseUrl`, so without a check the market would GET
 * any URL from inside its own network on a stranger's behalf (SSRF: loopback admin ports, the cloud
 * metadata service, private hosts). The same target rules as webhooks apply (webhookTargets.ts):
 *
 * - the URL is http(s) without credentials; its host is resolved once and *every* address must be
 *   public unless allowed by `allowTargets` (for local development, devnets and tests);
 * - the request goes to the checked address: `pinnedSellerFetch` connects there itself, so a DNS
 *   answer that changes between check and connection (rebinding) cannot redirect it. An injected
 *   `fetch` receives the checked target in `init.target` and may ignore it (tests do);
 * - GET only, no redirects followed, a timeout, and a body capped at `maxBytes`.
 */
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import type { LookupFunction } from "node:net";
import { Readable } from "node:stream";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { readBoundedText } from "../http/readBoundedText.ts";
import {
  type CheckedWebhookTarget,
  createWebhookTargetPolicy,
  type WebhookLookup,
} from "../http/webhookTargets.ts";
import { isTollgateError, TollgateError } from "../protocol/errors.ts";

/** Which seller URLs the market may fetch. */
export type SellerTargetOptions = {
  /**
   * Non-public addresses the market may fetch anyway: CIDRs or addresses (`127.0.0.0/8`, `::1`).
   * For development, devnets and tests, where sellers run on the same machine. Empty by default.
   */
  allowTargets?: readonly string[] | undefined;
  /** DNS (default `dns.lookup` with `all: true`); injected by tests. */
  lookup?: WebhookLookup | undefined;
};

/** `RequestInit` as the market's seller fetches receive it: with the address that was checked. */
export type SellerFetchInit = RequestInit & { target?: CheckedWebhookTarget };

/** A checked, bounded GET of a seller's discovery document; throws typed errors (see `fetchDocument`). */
export type SellerDocumentFetcher = (url: string) => Promise<unknown>;

/** Why a seller's document could not be read (`details.reason` of the error, and a liveness failure). */
export type SellerFetchFailure =
  | "refused_target"
  | "unreachable"
  | "timeout"
  | `http_${number}`
  | "too_large"
  | "not_json";

/**
 * The fetcher the registry and the liveness checker use.
 *
 * @example
 * const read = createSellerDocumentFetcher(pinnedSellerFetch, { allowTargets: ["127.0.0.0/8"] }, { timeoutMs: 5_000, maxBytes });
 * const document = await read("https://seller.example/.well-known/tollgate.json");
 */
export function createSellerDocumentFetcher(
  fetchFn: FetchFn,
  targets: SellerTargetOptions,
  limits: { timeoutMs: number; maxBytes: number },
): SellerDocumentFetcher {
  const policy = createWebhookTargetPolicy({
    allowTargets: targets.allowTargets,
    ...(targets.lookup === undefined ? {} : { lookup: targets.lookup }),
  });
  return async (url) => {
    let target: CheckedWebhookTarget;
    try {
      target = await policy.check(url);
    } catch (cause) {
      const reason = isTollgateError(cause) ? String(cause.details?.reason ?? "invalid_url") : "invalid_url";
      throw new TollgateError(
        "InvalidRequest",
        `the market does not fetch ${url}: ${reason === "private_address" ? "it is a loopback, link-local, private or reserved address" : reason.replaceAll("_", " ")}`,
        { details: { reason: "refused_target", target: reason, url }, cause },
      );
    }
    return fetchDocument(fetchFn, url, target, limits);
  };
}

/** Fetches and parses a document, bounded in time and size, without following redirects. */
async function fetchDocument(
  fetchFn: FetchFn,
  url: string,
  target: CheckedWebhookTarget,
  { timeoutMs, maxBytes }: { timeoutMs: number; maxBytes: number },
): Promise<unknown> {
  const unreachable = (failure: SellerFetchFailure, why: string, cause?: unknown) =>
    new TollgateError("ChainUnavailable", `could not read the seller's manifest at ${url}: ${why}`, {
      details: { reason: "seller_unreachable", failure, url },
      cause,
      retryAfter: 60,
    });
  let response: Response;
  let text: string;
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const init: SellerFetchInit = {
      method: "GET",
      headers: { accept: "application/json" },
      redirect: "manual",
      signal,
      target,
    };
    response = await fetchFn(url, init);
    if (!response.ok) {
      await response.body?.cancel();
      throw unreachable(`http_${response.status}`, `HTTP ${response.status}`);
    }
    text = await readBoundedText(
      response,
      maxBytes,
      () =>
        new TollgateError("PayloadTooLarge", `the seller's manifest document is over ${maxBytes} bytes`, {
          details: { reason: "document_too_large", failure: "too_large", url, maxBytes },
        }),
    );
  } catch (cause) {
    if (cause instanceof TollgateError) throw cause;
    // node's http.request rejects with an AbortError; the signal says it was the timeout.
    const timedOut = signal.aborted || (cause instanceof Error && cause.name === "TimeoutError");
    throw unreachable(
      timedOut ? "timeout" : "unreachable",
      timedOut ? "no answer in time" : "no answer",
      cause,
    );
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "the seller's manifest document is not JSON", {
      details: { reason: "malformed_document", failure: "not_json", url },
      cause,
    });
  }
}

/**
 * The market's default transport to sellers: one GET to the address the target policy checked
 * (`init.target`), never to a second resolution of the host name; the name still goes in `Host` and,
 * for https, in SNI and the certificate check. Redirects are not followed (node's `http.request`
 * never follows them), and the body is streamed so the caller can cap it.
 */
export const pinnedSellerFetch: FetchFn = (_input, init) =>
  new Promise<Response>((resolve, reject) => {
    const target = (init as SellerFetchInit | undefined)?.target;
    if (target === undefined) {
      reject(new TypeError("pinnedSellerFetch: no checked target (init.target)"));
      return;
    }
    const { address, family } = target.address;
    // net.connect asks this for the name's addresses; it only ever gets the checked one.
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
    const req = send(
      target.url,
      {
        method: "GET",
        headers: Object.fromEntries(new Headers(init?.headers)),
        lookup,
        signal: init?.signal ?? undefined,
        // One request per connection: a kept-alive socket would outlive the check it was made for.
        agent: false,
      },
      (res: IncomingMessage) => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status > 599) {
          res.destroy();
          reject(new Error(`invalid HTTP status ${status}`));
          return;
        }
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value);
        }
        const empty = status === 204 || status === 205 || status === 304;
        if (empty) res.destroy();
        resolve(
          new Response(empty ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>), {
            status,
            headers,
          }),
        );
      },
    );
    req.on("error", reject);
    req.end();
  });
