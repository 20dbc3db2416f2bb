/**
 * RPC URLs as operators write them: one or several, comma-separated, in order of preference; and as
 * they may be printed. Providers put the API key in the URL (`https://base-mainnet.g.alchemy.com/v2/KEY`,
 * `https://base-mainnet.infura.io/v3/KEY`, `https://name.base-mainnet.quiknode.pro/TOKEN/`,
 * `https://rpc.ankr.com/base/KEY`, `?apikey=KEY`, `https://user:pass@host`), so a URL is printed only
 * through `redactRpcUrl`: scheme, host and port stay (they say which provider), the rest is masked.
 */
import { z } from "zod";
import { TollgateError } from "../protocol/errors.ts";

/** What stands for a masked part. */
const MASK = "***";

/**
 * A path segment that is kept as it is: short words and version tags (`v2`, `rpc`, `base`, `mainnet`),
 * never a key. Providers' keys are 20 or more characters; anything of 16 or more, or with a digit beside
 * letters beyond a version tag, is masked.
 */
const PLAIN_SEGMENT = /^(?:v\d{1,2}|[a-z][a-z-]{0,14}|\d{1,6})$/i;

/**
 * The URL with its secret parts masked: user and password, every query value and fragment, and each
 * path segment that is not a plain word. Text that is not a URL is masked whole.
 *
 * @example
 * redactRpcUrl("https://base-mainnet.g.alchemy.com/v2/abc123def456ghi789jkl012") // "https://base-mainnet.g.alchemy.com/v2/***"
 */
export function redactRpcUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return MASK;
  }
  const auth = parsed.username !== "" || parsed.password !== "" ? `${MASK}@` : "";
  const path = parsed.pathname
    .split("/")
    .map((segment) => (segment === "" || PLAIN_SEGMENT.test(segment) ? segment : MASK))
    .join("/");
  const query = [...parsed.searchParams.keys()].map((key) => `${encodeURIComponent(key)}=${MASK}`).join("&");
  return `${parsed.protocol}//${auth}${parsed.host}${path === "/" ? "" : path}${query === "" ? "" : `?${query}`}${parsed.hash === "" ? "" : `#${MASK}`}`;
}

/** `text` with every occurrence of each of `urls` (as written, and as `URL` would print it) redacted. */
export function redactRpcUrlsIn(text: string, urls: readonly string[]): string {
  let out = text;
  for (const url of urls) {
    const forms = new Set([url, url.replace(/\/$/, "")]);
    try {
      const parsed = new URL(url);
      forms.add(parsed.href);
      // viem prints a URL with its credentials stripped (errors/utils.ts getUrl).
      parsed.username = "";
      parsed.password = "";
      forms.add(parsed.href);
      forms.add(parsed.href.replace(/\/$/, ""));
    } catch {}
    // Longest first: a URL is not left half-masked by a shorter form of itself.
    for (const form of [...forms].filter((f) => f.length > 0).sort((a, b) => b.length - a.length)) {
      out = out.split(form).join(redactRpcUrl(url));
    }
  }
  return out;
}

/**
 * Masks `urls` in an error and its causes, in place (message, short message, details, meta messages, a
 * `url` field), so a logged error prints no key. Returns the error.
 */
export function redactRpcUrlsInError<E>(error: E, urls: readonly string[]): E {
  const seen = new Set<unknown>();
  let current: unknown = error;
  while (current !== null && typeof current === "object" && !seen.has(current)) {
    seen.add(current);
    const e = current as Record<string, unknown>;
    for (const field of ["message", "shortMessage", "details", "url", "stack"]) {
      const value = e[field];
      if (typeof value === "string") {
        try {
          e[field] = redactRpcUrlsIn(value, urls);
        } catch {}
      }
    }
    if (Array.isArray(e.metaMessages)) {
      try {
        e.metaMessages = e.metaMessages.map((m) => (typeof m === "string" ? redactRpcUrlsIn(m, urls) : m));
      } catch {}
    }
    current = e.cause;
  }
  return error;
}

/** An environment setting of one RPC URL or several, comma-separated: the URLs, or an issue naming none in full. */
export const RpcUrlsSchema = z.string().transform((text, ctx) => {
  try {
    return parseRpcUrls(text, "");
  } catch (error) {
    ctx.addIssue({ code: "custom", message: (error as Error).message });
    return z.NEVER;
  }
});

/**
 * The RPC URLs of a setting: one URL or several, comma-separated, in order of preference (the first is
 * used while it answers). Each must be http(s); duplicates are refused. The error names no URL in full.
 */
export function parseRpcUrls(text: string, setting = "TOLLGATE_RPC_URL"): string[] {
  const urls = text
    .split(",")
    .map((part) => part.trim())
    .filter((part) => part !== "");
  if (urls.length === 0) {
    throw new TollgateError("InvalidRequest", `${setting || "the setting"} holds no URL`, {
      details: { setting },
    });
  }
  for (const [index, url] of urls.entries()) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(url);
    } catch {}
    if (parsed === undefined || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
      throw new TollgateError(
        "InvalidRequest",
        `${setting === "" ? "" : `${setting}: `}entry ${index + 1} (${redactRpcUrl(url)}) is not an http(s) URL`,
        { details: { setting, index } },
      );
    }
  }
  if (new Set(urls).size !== urls.length) {
    throw new TollgateError("InvalidRequest", `${setting || "the setting"} names a URL twice`, {
      details: { setting },
    });
  }
  return urls;
}
