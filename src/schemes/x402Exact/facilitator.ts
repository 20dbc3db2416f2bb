/**
 * The x402 `exact` interop's facilitator part: `POST /x402/verify` and `POST /x402/settle` (and
 * `GET /x402/supported`) as a standard x402 resource server calls them, settling through the same
 * engine as `exact`. `check` and `settle` answer exactly what those routes answer (they run them in
 * process). Loaded by the facilitator only, never by a gate.
 */
import {
  defineFacilitatorScheme,
  type FacilitatorSchemeContext,
} from "../../facilitator/facilitatorSchemeParts.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { X402SettleResponse, X402VerifyResponse } from "../../protocol/x402.ts";
import { x402Routes } from "./facilitator/x402Routes.ts";

export const x402ExactFacilitator = defineFacilitatorScheme({
  id: "x402Exact",
  core: true,
  create(ctx: FacilitatorSchemeContext) {
    const routes = x402Routes({
      engine: ctx.engine,
      supported: ctx.supported,
      store: ctx.store,
      clock: ctx.clock,
      logger: ctx.logger,
    });
    const call = async (path: string, body: unknown, signal: AbortSignal | undefined) => {
      const response = await routes.request(path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        signal: signal ?? null,
      });
      if (!(response.headers.get("content-type") ?? "").includes("application/json")) {
        throw new TollgateError("Internal", `x402 ${path} answered ${response.status} without a reply`);
      }
      return (await response.json()) as unknown;
    };
    return {
      rateLimited: ["/x402/verify", "/x402/settle"],
      async check({ body, signal }) {
        const reply = (await call("/verify", body, signal)) as X402VerifyResponse;
        return reply.isValid
          ? { valid: true }
          : { valid: false, reason: reply.invalidReason ?? "invalid_payload" };
      },
      settle: async ({ body, signal }) => (await call("/settle", body, signal)) as X402SettleResponse,
      routes(app) {
        app.route("/x402", routes);
      },
    };
  },
});
