/**
 * Metered units decided by the capability (`capability.units(input)`, docs/gate.md, "Metering"):
 * the gate reserves units before the handler runs, but it never reads request bodies, so the
 * specialist host reads and checks the input first, asks the capability how many units the call
 * draws, and hands that number to the gate with the request (`GateRequest.units`).
 *
 * Invariants:
 * - The units come from the server's own reading of the body, never from anything the client names.
 * - An input that does not parse is refused (400) before the gate: a malformed call is never charged.
 * - Capabilities without `units` are untouched: the route's default applies (1 unit per call on a
 *   metered plan).
 */
import type { Context, MiddlewareHandler } from "hono";
import type { GateRequest } from "../gate/gateRequest.ts";
import type { PaymentGate } from "../gate/paymentGate.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { Capability } from "./tools/capability.ts";

export type CapabilityUnits = {
  /** Hono middleware for the capability routes: parses the input and computes its units. */
  readUnits: MiddlewareHandler;
  /** The gate, given the units `readUnits` computed for each request. */
  withUnits(gate: PaymentGate): PaymentGate;
};

/**
 * A capability call's input: the request body (at most `maxBodyBytes`, JSON) checked against the
 * capability's schema; `PayloadTooLarge` or `InvalidRequest` otherwise. Hono keeps the parsed body, so
 * the units middleware and the handler read the stream once between them.
 */
export async function readCapabilityInput(
  c: Context,
  capability: Capability,
  maxBodyBytes: number,
): Promise<Record<string, unknown>> {
  if (Number(c.req.header("content-length") ?? "0") > maxBodyBytes) {
    throw new TollgateError("PayloadTooLarge", `request body over ${maxBodyBytes} bytes`);
  }
  let body: unknown;
  try {
    body = await c.req.json();
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "request body is not JSON", { cause });
  }
  const input = capability.input.safeParse(body);
  if (!input.success) {
    throw new TollgateError("InvalidRequest", `input does not match ${capability.name}'s schema`, {
      details: {
        issues: input.error.issues.slice(0, 10).map((i) => ({ path: i.path.join("."), message: i.message })),
      },
    });
  }
  return input.data as Record<string, unknown>;
}

/**
 * @example
 * const units = capabilityUnits(capabilities, (c) => `/${c.name}`, 256 * 1024);
 * app.use("*", units.readUnits);
 * app.use("*", honoPaymentGate(units.withUnits(gate)));
 */
export function capabilityUnits(
  capabilities: readonly Capability[],
  pathOf: (capability: Capability) => string,
  maxBodyBytes: number,
): CapabilityUnits {
  const byPath = new Map<string, Capability>();
  for (const capability of capabilities) {
    if (capability.units !== undefined) byPath.set(pathOf(capability), capability);
  }
  // Keyed by the request's Headers object: the one thing the Hono adapter hands the gate that is
  // the request's own (a WeakMap, so nothing outlives the request).
  const unitsOf = new WeakMap<object, number>();

  const readUnits: MiddlewareHandler = async (c, next) => {
    const capability = c.req.method === "POST" ? byPath.get(c.req.path) : undefined;
    if (capability?.units === undefined) return next();
    const input = await readCapabilityInput(c, capability, maxBodyBytes);
    const units = capability.units(input);
    if (!Number.isSafeInteger(units) || units < 0) {
      throw new TollgateError(
        "Internal",
        `capability ${capability.name}: units() returned ${String(units)}, not a whole number ≥ 0`,
      );
    }
    unitsOf.set(c.req.raw.headers, units);
    return next();
  };

  const withUnits = (gate: PaymentGate): PaymentGate =>
    function gateWithUnits(request: GateRequest) {
      const units = unitsOf.get(request.headers);
      return gate(units === undefined ? request : { ...request, units });
    };

  return { readUnits, withUnits };
}
