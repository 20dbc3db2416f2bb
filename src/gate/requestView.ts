/**
 * The request objects the gate hands to scheme parts, routes functions and `units` functions, built
 * once per paid request. Classes, so that building one allocates a plain object and no accessor
 * (an object literal with a getter costs several times as much); the URL is a prototype getter, so a
 * copy made with `{ ...request }` has none: read `url` from the request itself.
 */
import { bucketKey, clientAddress } from "../http/rateLimits.ts";
import type { SchemeRequest } from "../schemes/types.ts";
import type { GateRequest, RouteRequest } from "./gateRequest.ts";
import type { NormalizedTarget } from "./normalizeRequestTarget.ts";

/**
 * A request as gate parts read it. Its URL is built only if a routes function or a scheme reads it
 * (static routes and the one-time path never do): parsing one costs more than the rest of the routing.
 */
export class SchemeRequestView implements SchemeRequest {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly routePath: string;
  readonly target: string;
  readonly headers: SchemeRequest["headers"];
  readonly units: number | undefined;
  readonly #origin: string;
  readonly #remoteAddress: string | undefined;
  readonly #trustedProxies: ReadonlySet<string>;
  #url: URL | undefined;
  #client: string | undefined | null = null;

  constructor(
    method: string,
    path: string,
    reading: NormalizedTarget,
    request: GateRequest,
    origin: string,
    trustedProxies: ReadonlySet<string> = new Set(),
  ) {
    this.method = method;
    this.path = path;
    this.query = reading.query;
    this.routePath = reading.routePath;
    this.target = reading.target;
    this.headers = request.headers;
    this.units = request.units;
    this.#origin = origin;
    this.#remoteAddress = request.remoteAddress;
    this.#trustedProxies = trustedProxies;
  }

  /** Worked out when a part reads it (the channel scheme, for an id new to the gate). */
  get client(): string | undefined {
    if (this.#client === null) {
      const peer = this.#remoteAddress;
      const address =
        peer === undefined
          ? "unknown"
          : clientAddress(
              peer,
              this.#trustedProxies.size === 0
                ? undefined
                : (this.headers.get("x-forwarded-for") ?? undefined),
              this.#trustedProxies,
            );
      this.#client = address === "unknown" ? undefined : bucketKey(address);
    }
    return this.#client;
  }

  get url(): URL {
    this.#url ??= new URL(this.target, this.#origin);
    return this.#url;
  }
}

/** The request as routes and `units` functions read it: the path routers match, the URL when asked. */
export class RouteRequestView implements RouteRequest {
  readonly method: string;
  readonly path: string;
  readonly #request: { readonly url: URL };

  constructor(request: { readonly method: string; readonly routePath: string; readonly url: URL }) {
    this.method = request.method;
    this.path = request.routePath;
    this.#request = request;
  }

  get url(): URL {
    return this.#request.url;
  }
}
