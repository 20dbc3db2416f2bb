/**
 * The market registry service (docs/market.md, `tollgate market`) as a Hono app: sellers
 * register manifests signed by their payout key, buyers search the catalog. No socket is opened here:
 * tests call `app.request()`, and `serveMarket` binds the app to a port.
 *
 * Endpoints:
 * - `POST /sellers` `{ manifest, signature }` → 201 created | 200 updated, unchanged or superseded
 * - `GET /sellers?limit=&offset=`, `GET /sellers/:address`
 * - `DELETE /sellers/:address` `{ issuedAt, signature }` (signed by the seller)
 * - `POST /sellers/refresh` `{ address }` (only when the market was given a `fetch`)
 * - `POST /sellers/report` `{ address }`: a buyer's calls fail; the market checks the seller (only
 *   with a `fetch`; see sellerLiveness.ts)
 * - `GET /catalog?q=&maxPrice=&scheme=&network=&limit=&offset=`
 * - `GET /healthz`
 */
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { Logger } from "pino";
import { z } from "zod";
import { errorResponse, readJsonBody } from "../http/httpErrors.ts";
import { type RunningServer, serveApp } from "../http/serveApp.ts";
import { AddressSchema } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import { NetworkSchema } from "../protocol/network.ts";
import { parseWire } from "../protocol/parseWire.ts";
import { createSellerDocumentFetcher } from "./fetchSellerDocument.ts";
import {
  type CatalogResult,
  CatalogSchemeSchema,
  RefreshRequestSchema,
  type SellerList,
  SellerReportSchema,
} from "./marketApi.ts";
import { createMarketRegistry, type MarketRegistry, type MarketRegistryOptions } from "./marketRegistry.ts";
import { parseAtomicOrUsdcCeiling } from "./parseAtomicOrUsdcCeiling.ts";
import {
  createSellerLiveness,
  type SellerLiveness,
  type SellerLivenessOptions,
  startLivenessSweeps,
} from "./sellerLiveness.ts";

export type CreateMarketOptions = MarketRegistryOptions & {
  logger: Logger;
  /** Largest request body, in bytes (default: the registry's `maxManifestBytes` plus room for the envelope). */
  maxBodyBytes?: number | undefined;
  /**
   * Liveness checks of sellers (only with `fetch`): their schedule, back-off and reports. `sweepSeconds`
   * (default 15) is how often `serveMarket` looks for due checks; 0 turns the schedule off (reports
   * still check).
   */
  liveness?:
    | (SellerLivenessOptions & { sweepSeconds?: number | undefined; timeoutMs?: number | undefined })
    | undefined;
};

/** The market app and, when it may fetch sellers, its liveness checker (for `serveMarket`'s schedule). */
export type MarketService = { app: Hono; liveness: SellerLiveness | undefined };

const IntParamSchema = z
  .string()
  .regex(/^[0-9]{1,6}$/, { error: "expected a whole number" })
  .transform(Number)
  .optional();

const PageQuerySchema = z.object({ limit: IntParamSchema, offset: IntParamSchema });

const CatalogQuerySchema = z.object({
  q: z.string().optional(),
  maxPrice: z.string().optional(),
  scheme: CatalogSchemeSchema.optional(),
  network: NetworkSchema.optional(),
  limit: IntParamSchema,
  offset: IntParamSchema,
});

function parseAddressParam(value: string): `0x${string}` {
  return parseWire(AddressSchema, value, { what: "seller address" });
}

/**
 * The market app over a migrated store.
 *
 * @example
 * const store = await createStore({ databaseUrl: env.DATABASE_URL });
 * const app = createMarket({ store, clock: systemClock, logger, fetch });
 * const server = await serveApp(app, { port: 4030 });
 */
export function createMarket(options: CreateMarketOptions): Hono {
  return createMarketService(options).app;
}

/** `createMarket` with its liveness checker exposed (undefined without `fetch`). */
export function createMarketService(options: CreateMarketOptions): MarketService {
  const { logger, store } = options;
  const registry = createMarketRegistry(options);
  const liveness = marketLiveness(options);
  const maxBodyBytes = options.maxBodyBytes ?? (options.maxManifestBytes ?? 256 * 1024) + 4096;
  const app = new Hono();

  app.onError((error) => errorResponse(error, logger));
  app.notFound(() => errorResponse(new TollgateError("NotFound", "no such endpoint")));
  app.use(
    bodyLimit({
      maxSize: maxBodyBytes,
      onError: () =>
        errorResponse(
          new TollgateError("PayloadTooLarge", `request body is larger than ${maxBodyBytes} bytes`, {
            details: { maxBytes: maxBodyBytes },
          }),
        ),
    }),
  );
  mountSellerRoutes(app, registry, liveness, logger);
  mountCatalogRoutes(app, registry);
  app.get("/healthz", async (c) => {
    try {
      await store.query("SELECT 1");
      return c.json({ status: "ok", checks: { store: { ok: true } } });
    } catch {
      return c.json(
        { status: "degraded", checks: { store: { ok: false, message: "store unreachable" } } },
        503,
      );
    }
  });

  return { app, liveness };
}

/** The market's liveness checker, when it may fetch sellers. */
function marketLiveness(options: CreateMarketOptions): SellerLiveness | undefined {
  if (options.fetch === undefined) return undefined;
  return createSellerLiveness({
    ...options.liveness,
    store: options.store,
    clock: options.clock,
    fetchDocument: createSellerDocumentFetcher(options.fetch, options.sellerTargets ?? {}, {
      timeoutMs: options.liveness?.timeoutMs ?? 5_000,
      maxBytes: options.maxManifestBytes ?? 256 * 1024,
    }),
  });
}

/** `POST /sellers`, `GET /sellers`, `POST /sellers/refresh`, `POST /sellers/report`, `GET|DELETE /sellers/:address`. */
function mountSellerRoutes(
  app: Hono,
  registry: MarketRegistry,
  liveness: SellerLiveness | undefined,
  logger: Logger,
): void {
  app.post("/sellers", async (c) => {
    const body = await readJsonBody(c, z.unknown());
    const result = await registry.register(body);
    logger.info(
      { seller: result.address, status: result.status, issuedAt: result.issuedAt },
      "seller registration",
    );
    return c.json(result, result.status === "created" ? 201 : 200);
  });

  app.get("/sellers", async (c) => {
    const page = parseWire(PageQuerySchema, c.req.query(), { what: "query" });
    const limit = page.limit ?? 20;
    const offset = page.offset ?? 0;
    const body: SellerList = { sellers: await registry.list({ limit, offset }), limit, offset };
    return c.json(body);
  });

  app.post("/sellers/refresh", async (c) => {
    const { address } = await readJsonBody(c, RefreshRequestSchema);
    const result = await registry.refresh(address);
    logger.info({ seller: result.address, status: result.status }, "seller refreshed");
    return c.json(result, result.status === "created" ? 201 : 200);
  });

  app.post("/sellers/report", async (c) => {
    if (liveness === undefined) throw new TollgateError("NotFound", "this market does not check sellers");
    const { address } = await readJsonBody(c, SellerReportSchema);
    const result = await liveness.report(address);
    logger.info(
      {
        seller: result.address,
        checked: result.checked,
        reachable: result.reachable,
        error: result.lastError,
      },
      "seller reported unreachable",
    );
    return c.json({ ...result, address });
  });

  app.get("/sellers/:address", async (c) => {
    const record = await registry.get(parseAddressParam(c.req.param("address")));
    if (record === undefined) throw new TollgateError("NotFound", "no seller registered at that address");
    return c.json(record);
  });

  app.delete("/sellers/:address", async (c) => {
    const address = parseAddressParam(c.req.param("address"));
    const result = await registry.remove(address, await readJsonBody(c, z.unknown()));
    logger.info({ seller: result.address, status: result.status }, "seller removal");
    return c.json(result);
  });
}

/** `GET /catalog`. */
function mountCatalogRoutes(app: Hono, registry: MarketRegistry): void {
  app.get("/catalog", async (c) => {
    const query = parseWire(CatalogQuerySchema, c.req.query(), { what: "query" });
    const limit = query.limit ?? 20;
    const offset = query.offset ?? 0;
    const results = await registry.search({
      q: query.q,
      maxPrice: query.maxPrice === undefined ? undefined : parseAtomicOrUsdcCeiling(query.maxPrice),
      scheme: query.scheme,
      network: query.network,
      limit,
      offset,
    });
    const body: CatalogResult = { results, limit, offset };
    return c.json(body);
  });
}

/**
 * Builds the market and binds it to a loopback port (0 = a free one).
 *
 * @example
 * const market = await serveMarket({ store, clock: systemClock, logger, port: 4030 });
 * market.url; // http://127.0.0.1:4030
 */
export async function serveMarket(
  options: CreateMarketOptions & { port?: number | undefined; hostname?: string | undefined },
): Promise<RunningServer & { app: Hono }> {
  const { app, liveness } = createMarketService(options);
  const server = await serveApp(app, {
    ...(options.port === undefined ? {} : { port: options.port }),
    ...(options.hostname === undefined ? {} : { hostname: options.hostname }),
  });
  const sweepSeconds = options.liveness?.sweepSeconds ?? 15;
  const sweeps =
    liveness === undefined || sweepSeconds === 0
      ? undefined
      : startLivenessSweeps(liveness, { everyMs: sweepSeconds * 1000, logger: options.logger });
  return {
    ...server,
    app,
    async close() {
      await sweeps?.stop();
      await server.close();
    },
  };
}
