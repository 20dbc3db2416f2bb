import { Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { Logger } from "pino";
import { errorResponse } from "../http/httpErrors.ts";
import { routeDoc } from "../http/routeDocs.ts";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  type Health,
  HealthSchema,
  JwksSchema,
  type SupportedResponse,
  SupportedResponseSchema,
} from "../protocol/facilitator.ts";
import type { Store } from "../store/store.ts";
import type { HealthCheck } from "./gasHealth.ts";
import type { FacilitatorMetrics } from "./metrics.ts";
import { assertMetricsReader, isMetricsReader, type MetricsAccess } from "./metricsAccess.ts";
import { openApiDocumentOf } from "./openApi.ts";
import { jwksOf, type ProofKey } from "./proofKeys.ts";
import type { PausedToken } from "./tokenPauseWatch.ts";

export type FacilitatorAppDeps = {
  store: Store;
  /** Proof keys: the first signs, all verify (rotation keeps the old key here until its proofs expire). */
  proofKeys: () => readonly ProofKey[];
  supported: SupportedResponse;
  /** `/supported` with the minimums in force now, when they follow the network's fee (settlementFeeFloor.ts). */
  currentSupported?: (() => Promise<SupportedResponse>) | undefined;
  clock: Clock;
  logger: Logger;
  metrics: FacilitatorMetrics;
  /** Reads the chain head, for `/healthz`. */
  chainHealth: () => Promise<unknown>;
  /** The tokens paused by their issuer now (tokenPauseWatch.ts), for `/healthz`. */
  pausedTokens?: (() => readonly PausedToken[]) | undefined;
  /**
   * The gas key's checks for `/healthz` (gasHealth.ts: `fees`, `gas`); `detailed` when the caller may
   * read `/metrics`, who gets the figures (and fresh ones). No RPC call for anyone else.
   */
  gasChecks?: ((detailed: boolean) => Promise<Record<string, HealthCheck>>) | undefined;
  /** Largest accepted request body, in bytes. */
  maxBodyBytes?: number | undefined;
  /** Who may read `/metrics` (default: loopback peers only; see metricsAccess.ts). */
  metricsAccess?: MetricsAccess | undefined;
  /**
   * The per-client-address rate limit (abuse/rateLimits.ts), run before the endpoints that cost a
   * chain read or gas: `limitedPaths`, which the scheme parts name (`/authorize`, the x402 verify and
   * settle, relayed subscription calls, channel opens and reads).
   */
  limitClients?: MiddlewareHandler | undefined;
  limitedPaths?: readonly string[] | undefined;
  /** Routes mounted after the core ones: the scheme parts', then the modules'. */
  extend?: ((app: Hono) => void) | undefined;
};

export function createFacilitatorApp(deps: FacilitatorAppDeps): Hono {
  const app = new Hono();
  // Registration order is Hono's matching order: middleware first, then the core routes, then `extend`'s.
  useCoreMiddleware(app, deps);
  routeDiscovery(app, deps);
  routeHealth(app, deps);
  routeMetrics(app, deps);
  routeOpenApi(app);
  deps.extend?.(app);
  return app;
}

/** Error bodies, the request counter, the body limit and the per-client rate limit. */
function useCoreMiddleware(app: Hono, deps: FacilitatorAppDeps): void {
  const { logger, metrics } = deps;
  const maxBodyBytes = deps.maxBodyBytes ?? 64 * 1024;
  app.onError((error) => errorResponse(error, logger));
  app.notFound(() => errorResponse(new TollgateError("NotFound", "no such endpoint")));
  app.use(async (c, next) => {
    await next();
    metrics.requests.inc({ route: c.req.routePath, status: String(c.res.status) });
  });
  app.use(
    bodyLimit({
      maxSize: maxBodyBytes,
      onError: () => {
        const response = errorResponse(
          new TollgateError("PayloadTooLarge", `request body is larger than ${maxBodyBytes} bytes`, {
            details: { maxBytes: maxBodyBytes },
          }),
        );
        // The rest of the body was never read, so this connection cannot carry another request: a
        // client that reused it would see its next request cut off ("other side closed").
        response.headers.set("connection", "close");
        return response;
      },
    }),
  );

  if (deps.limitClients !== undefined) {
    for (const path of deps.limitedPaths ?? []) {
      app.use(path, deps.limitClients);
    }
  }
}

/** `/supported` and the proof keys' JWKS: what a gate reads to know this facilitator. */
function routeDiscovery(app: Hono, deps: FacilitatorAppDeps): void {
  app.get(
    "/supported",
    routeDoc({
      summary: "Networks, tokens and schemes this facilitator settles",
      response: SupportedResponseSchema,
    }),
    async (c) => c.json(deps.currentSupported === undefined ? deps.supported : await deps.currentSupported()),
  );
  app.get(
    "/.well-known/jwks.json",
    routeDoc({ summary: "Public keys that sign payment proofs", response: JwksSchema }),
    (c) => {
      c.header("cache-control", "public, max-age=300");
      return c.json(jwksOf(deps.proofKeys()));
    },
  );
}

function routeHealth(app: Hono, deps: FacilitatorAppDeps): void {
  app.get(
    "/healthz",
    routeDoc({
      summary:
        "Liveness of the chain RPC and the store; the token's pause, fees above the maximum fee, the gas key's runway",
      response: HealthSchema,
      errors: [503],
    }),
    async (c) => {
      const checks: NonNullable<Health["checks"]> = {};
      const [chain, db] = await Promise.allSettled([deps.chainHealth(), deps.store.query("SELECT 1")]);
      checks.chain = chain.status === "fulfilled" ? { ok: true } : { ok: false, message: "RPC unreachable" };
      checks.store = db.status === "fulfilled" ? { ok: true } : { ok: false, message: "store unreachable" };
      // A paused token leaves the answer 200: every instance would say the same, and a load balancer
      // that took them all out would stop the reads and the clear refusals that still work.
      const reachable = Object.values(checks).every((x) => x.ok);
      if (deps.pausedTokens !== undefined) checks.token = tokenCheck(deps.pausedTokens());
      if (deps.gasChecks !== undefined) {
        Object.assign(checks, await deps.gasChecks(isMetricsReader(c, deps.metricsAccess ?? {})));
      }
      const ok = Object.values(checks).every((x) => x.ok);
      const body: Health = { status: ok ? "ok" : "degraded", checks };
      return c.json(body, reachable ? 200 : 503);
    },
  );
}

function routeMetrics(app: Hono, deps: FacilitatorAppDeps): void {
  const { metrics } = deps;
  app.get(
    "/metrics",
    routeDoc({
      summary:
        "Prometheus metrics: settled count and volume, failures, batch sizes, settlement latency (loopback peers or the metrics token)",
      response: { media: "text/plain; version=0.0.4" },
      errors: [401],
      auth: ["metricsToken"],
    }),
    async (c) => {
      assertMetricsReader(c, deps.metricsAccess ?? {});
      c.header("content-type", metrics.registry.contentType);
      return c.body(await metrics.registry.metrics());
    },
  );
}

function routeOpenApi(app: Hono): void {
  // Built from `app.routes` on the first request, once `extend` has mounted every route.
  app.get(
    "/openapi.json",
    routeDoc({
      summary: "This document: every route served here, with its credentials",
      response: { media: "application/json" },
    }),
    (c) => c.json(openApiDocumentOf(app)),
  );
}

/**
 * `/healthz`'s `token` check: not ok while a token is paused by its issuer, with the earliest pause's
 * start as `since` (settlement in it is held; docs/facilitator.md, "When the token is paused").
 */
function tokenCheck(paused: readonly PausedToken[]): NonNullable<Health["checks"]>[string] {
  if (paused.length === 0) return { ok: true };
  const first = paused.reduce((a, b) => (b.since < a.since ? b : a));
  const names = paused.map((p) => `${p.symbol ?? "token"} ${p.token}`).join(", ");
  return {
    ok: false,
    message: `paused by its issuer: ${names}; settlement is held until it is unpaused`,
    since: first.since.toISOString(),
  };
}
