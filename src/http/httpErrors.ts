/**
 * The one place facilitator (and market) HTTP errors are shaped (docs/protocol.md, "Errors"): a `TollgateError`
 * becomes its status and `{ error: { code, message, details? } }`; `Retry-After` rides along when the
 * error carries one. A store or cache outage (isStoreUnavailable) is a 503 with Retry-After. Anything
 * else is a fault of ours: a 500 with no internals in the body.
 */
import type { Context } from "hono";
import type { Logger } from "pino";
import type { z } from "zod";
import { TollgateError } from "../protocol/errors.ts";
import { parseWire } from "../protocol/parseWire.ts";
import { isStoreUnavailable, storeUnavailableError } from "../store/storeErrors.ts";

export function errorResponse(error: unknown, logger?: Logger): Response {
  if (!(error instanceof TollgateError && error.code !== "Internal") && isStoreUnavailable(error)) {
    // PostgreSQL or Redis cut or down for a moment: the request may succeed again, so 503 + Retry-After.
    logger?.warn({ err: error }, "store unavailable");
    return errorResponse(storeUnavailableError(error));
  }
  if (error instanceof TollgateError && error.code !== "Internal") {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (error.retryAfter !== undefined) headers["retry-after"] = String(error.retryAfter);
    return new Response(JSON.stringify(error.toBody()), { status: error.status, headers });
  }
  logger?.error({ err: error }, "internal error");
  return new Response(
    JSON.stringify({ error: { code: "Internal", message: "internal error; it has been logged" } }),
    { status: 500, headers: { "content-type": "application/json" } },
  );
}

/** Reads and validates a JSON request body; malformed input is a 400 `InvalidRequest`, never a 500. */
export async function readJsonBody<S extends z.ZodType>(c: Context, schema: S): Promise<z.output<S>> {
  let value: unknown;
  try {
    value = await c.req.json();
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "request body is not valid JSON", { cause });
  }
  return parseWire(schema as z.ZodType<z.output<S>>, value, { what: "request body" });
}
