/** What the gate reads of a request: a web `Request` satisfies it, and adapters build it cheaply. */
export type GateRequest = {
  method: string;
  /**
   * The request target: origin-form (`/api/x?q`, what the adapters pass) or an absolute URL, whose
   * scheme and authority are ignored. Only its path and query are read (`normalizeRequestTarget`).
   */
  url: string;
  headers: { get(name: string): string | null };
  /**
   * Metered units of this request, when the host decides them from what the gate does not read (a
   * request body, as the specialist host does with `capability.units(input)`). Overrides the route's
   * `units`; a whole number ≥ 0. Only the server sets it, never a header the client sends.
   */
  units?: number | undefined;
  /**
   * The TCP peer's address as the host's server saw it (the adapters pass the socket's
   * `remoteAddress`); never from a header. The gate reads `X-Forwarded-For` only when this is one of
   * its `trustedProxies`. It keys per-client limits (`SchemeRequest.client`); absent, the request
   * shares the limits of every request without one.
   */
  remoteAddress?: string | undefined;
};

/**
 * What a route-resolver function is given: the upper-case method, the path percent-decoded once as
 * routers see it (so `/r%65ports` is `/reports`; dot segments removed), and the URL: that path and the
 * query as sent, on `publicOrigin` (`http://localhost` when it is not configured). The request's `Host`
 * never appears in it. The memo binds method, path and query, so a price may depend on all three.
 */
export type RouteRequest = { method: string; path: string; url: URL };
