/**
 * Route patterns for per-route pricing: `"GET /reports/:id"`, `"POST /summarize"`, `"/files/*"`.
 *
 * Grammar: an optional method (upper-case letters, or `*` for any) and a space, then a path of
 * `/`-separated segments. A segment is literal text, `:name` (exactly one non-empty segment) or, as
 * the last segment only, `*` (the rest of the path, possibly nothing).
 *
 * Matching errs on the side of charging, so that no router can be reached through a spelling the
 * gate does not price: letter case is ignored (Express routes case-insensitively by default), so is
 * a trailing slash (Express's non-strict routing), and a `GET` pattern also covers `HEAD` (which
 * Hono and Express route to the GET handler). The gate matches the path after `decodeURI`, as Hono
 * routes it (`/r%65ports` is `/reports`).
 */
import { TollgateError } from "../protocol/errors.ts";

export type RoutePattern = {
  /** The pattern as written. */
  readonly source: string;
  /** Upper-case method, or `undefined` for any method. */
  readonly method: string | undefined;
  matches(method: string, path: string): boolean;
};

const METHOD = /^(?:\*|[A-Z]{1,16})$/;
const SEGMENT = /^(?::[A-Za-z_][A-Za-z0-9_]*|[A-Za-z0-9\-._~!$&'()+,;=@%]*)$/;

/** Compiles a pattern; throws `InvalidRequest` with the reason for one that breaks the grammar. */
export function compileRoutePattern(source: string): RoutePattern {
  const refuse = (reason: string): never => {
    throw new TollgateError("InvalidRequest", `route pattern ${JSON.stringify(source)}: ${reason}`);
  };
  if (typeof source !== "string") return refuse("not a string");
  const parts = source.trim().split(/\s+/);
  const [methodText, path] = parts.length === 2 ? parts : [undefined, parts[0]];
  if (parts.length > 2 || path === undefined) return refuse("expected `METHOD /path` or `/path`");
  if (methodText !== undefined && !METHOD.test(methodText)) return refuse("method must be upper case or *");
  if (!path.startsWith("/")) return refuse("path must start with /");

  const segments = path.slice(1).split("/");
  let regex = "";
  segments.forEach((segment, index) => {
    const last = index === segments.length - 1;
    if (segment === "*") {
      if (!last) refuse("* may only be the last segment");
      regex += "(?:/.*)?";
      return;
    }
    if (!SEGMENT.test(segment)) refuse(`segment ${JSON.stringify(segment)} is not literal text or :name`);
    if (segment === "" && last) return; // "/a/" is "/a"; "/" is the root.
    if (segment === "") refuse("empty segment");
    regex += segment.startsWith(":") ? "/[^/]+" : `/${segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`;
  });
  const compiled = new RegExp(`^${regex}/?$`, "i");
  const method = methodText === undefined || methodText === "*" ? undefined : methodText;
  return {
    source,
    method,
    matches: (requestMethod, requestPath) =>
      (method === undefined || method === requestMethod || (method === "GET" && requestMethod === "HEAD")) &&
      compiled.test(requestPath),
  };
}
