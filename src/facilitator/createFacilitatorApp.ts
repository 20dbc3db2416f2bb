/**
 * The facilitator's HTTP surface (DESIGN.md §4) as a Hono app: no socket is opened here, so tests call
 * `app.request()` and `serveFacilitator` binds it to a port.
 */
import { verify } from "node:crypto";
import { Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { Logger } from "pino";
import { sameAddress } from "../protocol/address.ts";
import { base64UrlDecode } from "../protocol/base64.ts";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import {
  type Health,
  type SupportedResponse,
  VerifyRequestSchema,
  type VerifyResponse,
} from "../protocol/facilitator.ts";
import { memoNonce } from "../protocol/memo.ts";
import { type PaymentProof, proofSigningInput } from "../protocol/paymentProof.ts";
import { AuthorizeRequestSchema } from "../protocol/signedPayment.ts";
import type { Store } from "../store/store.ts";
import { errorResponse, readJsonBody } from "./httpErrors.ts";
import type { FacilitatorMetrics } from "./metrics.ts";
import { assertMetricsReader, type MetricsAccess } from "./metricsAccess.ts";
import { buildOpenApiDocument } from "./openApi.ts";
import { mountPaymentReadBack } from "./paymentReadBack.ts";
import { jwksOf, type ProofKey } from "./proofKeys.ts";
import type { SettlementEngine } from "./settlementEngine.ts";
import { x402Routes } from "./x402Routes.ts";

export type FacilitatorAppDeps = {
  engine: SettlementEngine;
  store: Store;
  /** Proof keys: the first signs, all verify (rotation keeps the old key here until its proofs expire). */
  proofKeys: () => readonly ProofKey[];
  supported: SupportedResponse;
  clock: Clock;
  logger: Logger;
  metrics: FacilitatorMetrics;
  /** Reads the chain head, for `/healthz`. */
  chainHealth: () => Promise<unknown>;
  /** Largest accepted request body, in bytes. */
  maxBodyBytes?: number | undefined;
  /** Who may read `/metrics` (default: loopback peers only; see metricsAccess.ts). */
  metricsAccess?: MetricsAccess | undefined;
  /**
   * The per-client-address rate limit (abuse/rateLimits.ts), run before the endpoints that cost a
   * chain read or gas: `/authorize`, the x402 verify and settle, relayed subscription calls.
   */
  limitClients?: MiddlewareHandler | undefined;
  /** Extra routes mounted by later modules (x402, subscriptions, webhooks, analytics). */
  extend?: ((app: Hono) => void) | undefined;
};

export function createFacilitatorApp(deps: FacilitatorAppDeps): Hono {
  const { engine, store, clock, logger, metrics } = deps;
  const app = new Hono();
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
      onError: () =>
        errorResponse(
          new TollgateError("PayloadTooLarge", `request body is larger than ${maxBodyBytes} bytes`, {
            details: { maxBytes: maxBodyBytes },
          }),
        ),
    }),
  );

  if (deps.limitClients !== undefined) {
    for (const path of ["/authorize", "/x402/verify", "/x402/settle", "/subscriptions", "/subscriptions/*"]) {
      app.use(path, deps.limitClients);
    }
  }

  app.post("/authorize", async (c) => {
    const { signedPayment } = await readJsonBody(c, AuthorizeRequestSchema);
    const { proof, row, batchSize } = await engine.authorize(signedPayment);
    return c.json({
      proof,
      settled: {
        transaction: row.tx_hash ?? proof.tx,
        blockNumber: (row.block_number ?? 0n).toString(),
        batchSize,
      },
    });
  });

  app.post("/verify", async (c) => {
    const { proof } = await readJsonBody(c, VerifyRequestSchema);
    return c.json(await verifyOwnProof(proof));
  });

  mountPaymentReadBack(app, { engine, store, clock });

  app.get("/supported", (c) => c.json(deps.supported));
  app.route("/x402", x402Routes({ engine, supported: deps.supported, store, clock, logger }));
  app.get("/.well-known/jwks.json", (c) => {
    c.header("cache-control", "public, max-age=300");
    return c.json(jwksOf(deps.proofKeys()));
  });

  app.get("/healthz", async (c) => {
    const checks: NonNullable<Health["checks"]> = {};
    const [chain, db] = await Promise.allSettled([deps.chainHealth(), store.query("SELECT 1")]);
    checks.chain = chain.status === "fulfilled" ? { ok: true } : { ok: false, message: "RPC unreachable" };
    checks.store = db.status === "fulfilled" ? { ok: true } : { ok: false, message: "store unreachable" };
    const ok = Object.values(checks).every((x) => x.ok);
    const body: Health = { status: ok ? "ok" : "degraded", checks };
    return c.json(body, ok ? 200 : 503);
  });

  app.get("/metrics", async (c) => {
    assertMetricsReader(c, deps.metricsAccess ?? {});
    c.header("content-type", metrics.registry.contentType);
    return c.body(await metrics.registry.metrics());
  });

  app.get("/openapi.json", (c) => c.json(buildOpenApiDocument()));

  deps.extend?.(app);

  /**
   * A proof is valid when one of our keys signed it, it has not expired, and the payment it names
   * is settled in our store with the same transaction, amount and payee.
   */
  async function verifyOwnProof(proof: PaymentProof): Promise<VerifyResponse> {
    const key = deps.proofKeys().find((k) => k.kid === proof.kid);
    if (key === undefined) return { valid: false, reason: "unknown_kid" };
    const { sig, ...unsigned } = proof;
    const ok = verify(
      null,
      Buffer.from(proofSigningInput(unsigned), "utf8"),
      key.privateKey,
      base64UrlDecode(sig),
    );
    if (!ok) return { valid: false, reason: "bad_signature" };
    if (proof.exp <= unixSeconds(clock)) return { valid: false, reason: "expired" };
    const row = await engine.getPayment(memoNonce(proof.memo));
    if (row === undefined || row.status !== "settled") return { valid: false, reason: "not_settled" };
    if (
      row.tx_hash !== proof.tx.toLowerCase() ||
      row.amount !== BigInt(proof.amount) ||
      !sameAddress(row.pay_to, proof.payTo)
    ) {
      return { valid: false, reason: "mismatch" };
    }
    return { valid: true };
  }

  return app;
}
