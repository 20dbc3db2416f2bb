/**
 * What the facilitator's OpenAPI document says about each route, declared in the registration that
 * serves it: `app.post("/channels", routeDoc({ summary, request, response }), handler)`. The document
 * (src/facilitator/openApi.ts) is built from the routes a Hono app actually serves (`app.routes`),
 * so a route cannot be served without being listed, nor listed without being served.
 *
 * Authentication is read from the same place: a middleware made by `authenticating` (the provider
 * key check, the dashboard session) marks every route it guards, whether it is given in the route's
 * registration or by an earlier `app.use` whose path covers the route. A handler that checks a
 * credential itself says so in its `auth`.
 */
import type { Hono, MiddlewareHandler } from "hono";
import type { z } from "zod";

/** The credentials of docs/facilitator.md, "Who may read what"; openApi.ts describes each. */
export type RouteAuth = "providerKey" | "payerAuth" | "metricsToken" | "dashboardSession";

/** The documentation of one route. */
export type RouteDoc = {
  summary: string;
  /** The JSON body, or `form` for a url-encoded form (the dashboard's). */
  request?: z.ZodType | "form" | undefined;
  /** The JSON reply, or the media type of another (`text/html`); absent for a redirect. */
  response?: z.ZodType | { media: string } | undefined;
  /** The success status (default 200). */
  status?: number | undefined;
  /** Error statuses the route answers with an ErrorBody. */
  errors?: readonly number[] | undefined;
  /** Path parameters, by name (default: strings). */
  params?: Readonly<Record<string, z.ZodType>> | undefined;
  /** The query string, an object schema. */
  query?: z.ZodObject | undefined;
  /** Credentials the handler checks itself (any one of them admits). */
  auth?: readonly RouteAuth[] | undefined;
};

const docs = new WeakMap<object, RouteDoc>();
const auths = new WeakMap<object, RouteAuth>();

/**
 * A pass-through middleware carrying a route's documentation; put it in the route's registration.
 *
 * @example
 * app.get("/channels/:id", routeDoc({ summary: "A channel's chain state", response: ChannelStateSchema }), handler);
 */
export function routeDoc(doc: RouteDoc): MiddlewareHandler {
  const middleware: MiddlewareHandler = async (_c, next) => {
    await next();
  };
  docs.set(middleware, doc);
  return middleware;
}

/** Marks `middleware` as the check of credential `auth`, for the routes it guards. */
export function authenticating<M extends object>(auth: RouteAuth, middleware: M): M {
  auths.set(middleware, auth);
  return middleware;
}

/** A route the app serves, with its documentation (undefined when none was given) and credentials. */
export type ServedRoute = {
  method: string;
  /** The Hono path (`/channels/:id`). */
  path: string;
  doc: RouteDoc | undefined;
  /** The credentials that admit a caller, any one of them; empty for a public route. */
  auth: readonly RouteAuth[];
};

/**
 * The routes `app` serves, in registration order. `app.use` entries (method `ALL`) are middleware,
 * not routes; a marked one guards the routes registered after it under its path.
 */
export function servedRoutes(app: Pick<Hono, "routes">): ServedRoute[] {
  const guards: { index: number; pattern: RegExp; auth: RouteAuth }[] = [];
  const routes = new Map<string, { method: string; path: string; first: number; handlers: object[] }>();
  app.routes.forEach((entry, index) => {
    const handler = unwrap(entry.handler);
    if (entry.method === "ALL") {
      const auth = auths.get(handler);
      if (auth !== undefined) guards.push({ index, pattern: pathPattern(entry.path), auth });
      return;
    }
    const key = `${entry.method} ${entry.path}`;
    const route = routes.get(key) ?? { method: entry.method, path: entry.path, first: index, handlers: [] };
    route.handlers.push(handler);
    routes.set(key, route);
  });
  return [...routes.values()].map(({ method, path, first, handlers }) => {
    const doc = handlers.map((h) => docs.get(h)).find((d) => d !== undefined);
    const auth = new Set<RouteAuth>(doc?.auth ?? []);
    for (const h of handlers) {
      const a = auths.get(h);
      if (a !== undefined) auth.add(a);
    }
    for (const guard of guards) {
      if (guard.index < first && guard.pattern.test(path)) auth.add(guard.auth);
    }
    return { method, path, doc, auth: [...auth] };
  });
}

/** `/channels/:id` → `/channels/{id}` (a parameter's `{regex}` constraint dropped). */
export function openApiPath(honoPath: string): string {
  return honoPath.replace(/:(\w+)(\{[^}]*\})?\??/g, "{$1}");
}

/** The names of a Hono path's parameters. */
export function pathParams(honoPath: string): string[] {
  return [...honoPath.matchAll(/:(\w+)/g)].map((m) => m[1] ?? "");
}

/** A handler a mounted sub-app wrapped in its own error handler (hono-base.ts `route`) is the original. */
function unwrap(handler: object): object {
  const inner = (handler as { __COMPOSED_HANDLER?: unknown }).__COMPOSED_HANDLER;
  return typeof inner === "function" ? inner : handler;
}

/** Hono's matching of a middleware path: `*` any rest, `/x/*` also `/x`, `:p` one segment. */
function pathPattern(path: string): RegExp {
  let source = "";
  const wildcardRest = path.endsWith("/*");
  const body = wildcardRest ? path.slice(0, -2) : path;
  for (const part of body.split(/(\*|:\w+(?:\{[^}]*\})?)/)) {
    if (part === "*") source += ".*";
    else if (part.startsWith(":")) source += "[^/]+";
    else source += part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${source}${wildcardRest ? "(/.*)?" : ""}$`);
}
