/**
 * The scheme registry: the one place scheme ids are looked up. A gate or a client builds one at
 * construction from the built-in schemes (`builtinSchemes`, one line per scheme) followed by any extra
 * schemes its caller passes (`paymentGate({ schemes: [toy] })`, `fetchWithPayment(fetch, payer,
 * { schemes: [toy] })`), and keeps what it needs of it; nothing is looked up per request.
 *
 * Invariants: ids are unique, and so is each pricing `type` a gate part compiles; an extra scheme never
 * replaces a built-in one (a clash throws `InvalidRequest` naming both). Order is precedence: when a
 * request carries credentials of several schemes, the earlier scheme's part owns it.
 */
import { z } from "zod";
import { TollgateError } from "../protocol/errors.ts";
import type { ClientSchemePart, Scheme, SchemeId } from "./types.ts";

/** A scheme id: a lower-case letter, then up to 31 letters, digits or `-` (`exact`, `x402Exact`). */
export const SchemeIdSchema = z.string().regex(/^[a-z][a-zA-Z0-9-]{0,31}$/, {
  error: "a scheme id is a letter then up to 31 letters, digits or -",
});

/**
 * Declares a scheme, checking its shape once; returns it unchanged with its literal types.
 *
 * @example
 * export const toyScheme = defineScheme({ id: "toy", description: "pays with a toy token",
 *   gate: toyGate, client: toyClient });
 */
export function defineScheme<const S extends Scheme>(scheme: S): S {
  const where = `scheme ${JSON.stringify((scheme as { id?: unknown })?.id)}`;
  if (typeof scheme !== "object" || scheme === null) {
    throw new TollgateError(
      "InvalidRequest",
      "defineScheme: a scheme is { id, description, gate?, client? }",
    );
  }
  const id = SchemeIdSchema.safeParse(scheme.id);
  if (!id.success) throw new TollgateError("InvalidRequest", `${where}: ${id.error.issues[0]?.message}`);
  if (typeof scheme.description !== "string" || scheme.description.length === 0) {
    throw new TollgateError("InvalidRequest", `${where}: needs a description`);
  }
  if (scheme.gate === undefined && scheme.client === undefined) {
    throw new TollgateError("InvalidRequest", `${where}: needs a gate part, a client part, or both`);
  }
  if (scheme.gate !== undefined) {
    if (typeof scheme.gate.create !== "function" || !Array.isArray(scheme.gate.pricingTypes)) {
      throw new TollgateError("InvalidRequest", `${where}: gate part is { pricingTypes, create(context) }`);
    }
  }
  if (scheme.client !== undefined) {
    const client = scheme.client;
    if (typeof client.payable !== "function" || typeof client.callPrice !== "function") {
      throw new TollgateError("InvalidRequest", `${where}: client part needs payable() and callPrice()`);
    }
  }
  return scheme;
}

/** The schemes a gate or client knows, in precedence order. */
export type SchemeRegistry = {
  readonly schemes: readonly Scheme[];
  get(id: SchemeId): Scheme | undefined;
  /** The scheme whose gate part compiles pricing entries of `type` (`"one-time"` → `exact`). */
  forPricingType(type: string): Scheme | undefined;
  /** The client part that pays options of `scheme`, if one is registered. */
  client(scheme: SchemeId): ClientSchemePart | undefined;
};

/**
 * A registry of `base` (the built-in schemes, in precedence order) followed by `extra`. Throws
 * `InvalidRequest` when an id or a pricing type is registered twice, or an entry is not a scheme.
 */
export function createSchemeRegistry(base: readonly Scheme[], extra: readonly Scheme[] = []): SchemeRegistry {
  if (!Array.isArray(extra)) {
    throw new TollgateError("InvalidRequest", "schemes: expected an array of schemes (defineScheme)");
  }
  const schemes = [...base, ...extra.map((scheme) => defineScheme(scheme))];
  const byId = new Map<SchemeId, Scheme>();
  const byPricingType = new Map<string, Scheme>();
  for (const scheme of schemes) {
    if (byId.has(scheme.id)) {
      throw new TollgateError("InvalidRequest", `schemes: scheme "${scheme.id}" is registered twice`, {
        details: { scheme: scheme.id },
      });
    }
    byId.set(scheme.id, scheme);
    for (const type of scheme.gate?.pricingTypes ?? []) {
      const holder = byPricingType.get(type);
      if (holder !== undefined) {
        throw new TollgateError(
          "InvalidRequest",
          `schemes: pricing type "${type}" of scheme "${scheme.id}" is already compiled by "${holder.id}"`,
          { details: { scheme: scheme.id, holder: holder.id, type } },
        );
      }
      byPricingType.set(type, scheme);
    }
  }
  return {
    schemes,
    get: (id) => byId.get(id),
    forPricingType: (type) => byPricingType.get(type),
    client: (scheme) => byId.get(scheme)?.client,
  };
}
