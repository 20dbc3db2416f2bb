/**
 * One reading of an HTTP request target for every adapter and the gate core (docs/gate.md), so that
 * the path the gate prices is the path the framework routes on.
 *
 * Invariants:
 * - Only the request target is read, never `Host`: an absolute-form target (`GET http://host/x`) is
 *   reduced to its path and query, and its authority is ignored. The gate's origin is configured.
 * - The path has no dot segments: `.`, `..` and their percent-encoded spellings (`%2e`, `.%2E`, …) are
 *   removed as RFC 3986 §5.2.4 says, as WHATWG URL parsing (and so Hono) does too.
 * - A target that frameworks read in different ways is refused, not guessed at: a fragment (`#`), a
 *   backslash, an encoded slash or backslash (`%2F`, `%5C`), an encoded control character, malformed
 *   percent-encoding, a path starting with `//` (a network-path reference to URL parsers), and any
 *   character outside visible ASCII.
 * - `routePath` is the path decoded exactly once, the way Hono's router decodes it; decoding it again is
 *   never done (`%252e` stays `%2e`).
 */

/** The target as the gate reads it. */
export type NormalizedTarget = {
  ok: true;
  /** The path: starts with one `/`, no dot segments, percent-encoding otherwise as sent. What a memo binds. */
  path: string;
  /** The query without its `?`; `""` when there is none (or it is empty). */
  query: string;
  /** `path` decoded once, as routers match it (`/r%65ports` is `/reports`). */
  routePath: string;
  /** `path` and `?query` (when there is a query): the origin-form target to hand to a handler. */
  target: string;
  /** Whether dot segments were removed: the path as sent is not the path returned. */
  dotSegments: boolean;
  /** Whether the target was in absolute-form (`http://host/x`) and has been reduced to its path. */
  absoluteForm: boolean;
};

export type RequestTargetReading = NormalizedTarget | { ok: false; reason: string };

/** Longest request target read; Node's own limit on the whole head is 16 KiB. */
export const MAX_REQUEST_TARGET_LENGTH = 8192;

/** Visible ASCII only (no space, no control, nothing above 0x7E). */
const VISIBLE_ASCII = /^[\x21-\x7e]*$/;
/**
 * What a path may hold: visible ASCII except the characters WHATWG URL serialization never leaves raw in
 * a path (`"`, `<`, `>`, `` ` ``, `{`, `}`), the delimiters `?` and `#`, and `\` (which URL parsers read
 * as `/`). `%` is allowed here and its escapes are checked separately.
 */
const PATH_CHARACTERS = /^[\x21\x24-\x3b\x3d\x40-\x5b\x5d-\x5f\x61-\x7a\x7c\x7e]*$/;
const PERCENT_ESCAPE = /%(?![0-9A-Fa-f]{2})/;
/** Encoded `/`, `\`, C0 controls and DEL: each decodes into something another router splits or drops. */
const AMBIGUOUS_ESCAPE = /%(?:2[Ff]|5[Cc]|[01][0-9A-Fa-f]|7[Ff])/;
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//;
/** A segment that is `.` or `..`, literally or percent-encoded, anywhere in a path. */
/**
 * A path that needs none of the checks below: `/` or segments of unreserved characters that do not
 * start with a dot (so none is `.` or `..`, and none is empty), with an optional trailing slash.
 */
const PLAIN_PATH = /^(?:\/|(?:\/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+\/?)$/;
const DOT_SEGMENT = /(?:^|\/)(?:\.|%2[Ee]){1,2}(?:\/|$)/;
const SINGLE_DOT = /^(?:\.|%2[Ee])$/;
const DOUBLE_DOT = /^(?:\.|%2[Ee]){2}$/;

/**
 * Reads a request target (origin-form `/a/b?q`, or absolute-form `http://host/a/b?q`) into the path the
 * gate prices. Never throws: a target is untrusted input.
 *
 * @example
 * normalizeRequestTarget("http://evil/x/../api/r%65ports/1?size=large");
 * // { ok: true, path: "/api/r%65ports/1", routePath: "/api/reports/1", query: "size=large", dotSegments: true, … }
 */
export function normalizeRequestTarget(target: string): RequestTargetReading {
  if (typeof target !== "string" || target === "") return refuse("the request target is empty");
  if (target.length > MAX_REQUEST_TARGET_LENGTH) return refuse("the request target is too long");
  if (!VISIBLE_ASCII.test(target)) {
    return refuse("the request target holds a character that is not visible ASCII");
  }
  if (target.includes("#")) return refuse("the request target holds a fragment (#)");
  let rest = target;
  const absoluteForm = ABSOLUTE_FORM.test(target);
  if (absoluteForm) {
    // RFC 9112 §3.2.2: the authority ends at the first "/", "?" (or "#", refused above).
    const afterScheme = target.indexOf("//") + 2;
    const end = target.slice(afterScheme).search(/[/?]/);
    rest = end === -1 ? "/" : target.slice(afterScheme + end);
    if (rest.startsWith("?")) rest = `/${rest}`;
  } else if (!target.startsWith("/")) {
    return refuse("the request target is neither a path nor an absolute URL");
  }
  const queryAt = rest.indexOf("?");
  const rawPath = queryAt === -1 ? rest : rest.slice(0, queryAt);
  const query = queryAt === -1 ? "" : rest.slice(queryAt + 1);

  if (PLAIN_PATH.test(rawPath)) {
    // The common case, read by one pattern: no escapes, no empty or dot segments.
    return {
      ok: true,
      path: rawPath,
      query,
      routePath: rawPath,
      target: query === "" ? rawPath : `${rawPath}?${query}`,
      dotSegments: false,
      absoluteForm,
    };
  }
  return readPath(rawPath, query, absoluteForm);
}

/** The checks of a path `PLAIN_PATH` does not match. Exported for the test that compares both. */
export function readPath(rawPath: string, query: string, absoluteForm: boolean): RequestTargetReading {
  if (!PATH_CHARACTERS.test(rawPath)) {
    return refuse("the request path holds a character a URL path may not hold unescaped");
  }
  if (PERCENT_ESCAPE.test(rawPath)) return refuse("the request path has a malformed percent-escape");
  if (AMBIGUOUS_ESCAPE.test(rawPath)) {
    return refuse("the request path has an encoded slash, backslash or control character");
  }
  const dotSegments = DOT_SEGMENT.test(rawPath);
  const path = dotSegments ? removeDotSegments(rawPath) : rawPath;
  if (path.startsWith("//")) return refuse("the request path starts with //");
  return {
    ok: true,
    path,
    query,
    routePath: decodePathOnce(path),
    target: query === "" ? path : `${path}?${query}`,
    dotSegments,
    absoluteForm,
  };
}

/** RFC 3986 §5.2.4 over segments, for a path starting with "/"; a removed last segment leaves a "/". */
function removeDotSegments(path: string): string {
  const input = path.split("/");
  const output: string[] = [];
  for (let index = 1; index < input.length; index++) {
    const segment = input[index] as string;
    const last = index === input.length - 1;
    if (SINGLE_DOT.test(segment)) {
      if (last) output.push("");
    } else if (DOUBLE_DOT.test(segment)) {
      output.pop();
      if (last) output.push("");
    } else {
      output.push(segment);
    }
  }
  return `/${output.join("/")}`;
}

/**
 * A path as routers see it: each run of percent-escapes decoded with `decodeURI` (so reserved
 * characters such as `%3F` stay escaped), a run that is not UTF-8 left as it is, like Hono's router.
 */
export function decodePathOnce(path: string): string {
  if (!path.includes("%")) return path;
  return path.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURI(run);
    } catch {
      return run;
    }
  });
}

/**
 * The 400 an adapter answers for a target it cannot serve as the gate priced it: unreadable, or with
 * dot segments its framework would route on as they are (the error body of docs/protocol.md, "Errors").
 */
export function targetRefusal(reading: RequestTargetReading): Response {
  let message: string;
  if (!reading.ok) message = reading.reason;
  else if (reading.dotSegments) message = `the request path has dot segments; send it as ${reading.path}`;
  else message = "the request path reads differently to this server's router; send it percent-encoded";
  return new Response(JSON.stringify({ error: { code: "InvalidRequest", message } }), {
    status: 400,
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });
}

function refuse(reason: string): { ok: false; reason: string } {
  return { ok: false, reason };
}
