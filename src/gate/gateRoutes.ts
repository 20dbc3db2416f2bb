/**
 * A gate's routes, compiled once at construction: each pricing entry by the scheme part of its `type`
 * into an offer, each offer with the part that describes it in a 402, and the parts that accept
 * credentials for it, in precedence order. A routes function's answers are compiled once per object
 * it returns. Nothing of the scheme registry is looked up per request.
 */
import { TollgateError } from "../protocol/errors.ts";
import type { GateScheme, GateSchemeContext, SchemeId, SchemeOffer, SchemeRoute } from "../schemes/types.ts";
import type { RouteRequest } from "./gateRequest.ts";
import {
  type GatePricingEntry,
  parseGateOptions,
  type RouteConfig,
  RouteConfigSchema,
} from "./paymentGateOptions.ts";
import { compileRoutePattern } from "./routePattern.ts";

/** A part that accepts credentials on a route, with its offers there. */
export type Acceptor = {
  part: GateScheme & Required<Pick<GateScheme, "credential" | "accept">>;
  route: SchemeRoute;
};

export type CompiledRoute = {
  /** Every pricing entry in order, with the part that describes it in the 402. */
  entries: readonly { offer: SchemeOffer; part: GateScheme & Required<Pick<GateScheme, "offer">> }[];
  /** The parts that accept credentials for this route's offers, in precedence order. */
  acceptors: readonly Acceptor[];
  description: string | undefined;
  mimeType: string | undefined;
};

/** A gate's schemes, built once: each part by id, and which offer schemes each accepting part takes. */
export type GateParts = {
  byId: ReadonlyMap<SchemeId, GateScheme>;
  /** Parts by the pricing `type` they compile. */
  compilers: ReadonlyMap<string, { id: SchemeId; part: GateScheme }>;
  /** Accepting parts in precedence order, with the offer schemes each takes. */
  accepting: readonly { part: Acceptor["part"]; takes: ReadonlySet<SchemeId> }[];
};

/** What of the gate's options its routes are compiled from. */
export type RouteOptions = {
  pricing?: readonly GatePricingEntry[] | undefined;
  routes?: Record<string, RouteConfig> | ((request: RouteRequest) => RouteConfig | undefined) | undefined;
  description?: string | undefined;
};

/** The gate's compiled routes: the route of a request, and routes of a pricing list alone. */
export class GateRoutes {
  /** Every route known at construction (the gate's `pricing` and its table's), for `ready`. */
  readonly staticRoutes: CompiledRoute[] = [];
  /** The route that prices a request, or `undefined` for a free one. */
  readonly resolve: (request: RouteRequest) => CompiledRoute | undefined;
  readonly #parts: GateParts;
  readonly #description: string | undefined;

  constructor(parts: GateParts, options: RouteOptions) {
    this.#parts = parts;
    this.#description = options.description;
    const fallback =
      options.pricing === undefined
        ? undefined
        : this.priced(options.pricing, "pricing", options.description);
    if (fallback !== undefined) this.staticRoutes.push(fallback);
    this.resolve = routeResolverOf(
      options.routes,
      fallback,
      (route, where) => this.#toRoute(route, where),
      this.staticRoutes,
    );
  }

  /** A route priced by a list of entries alone (the gate's `pricing`; `buildPaymentRequired`'s). */
  priced(
    pricing: readonly GatePricingEntry[],
    where: string,
    description: string | undefined,
  ): CompiledRoute {
    return routeOf(this.#parts, this.#compile(pricing, where), description);
  }

  /** Compiles a pricing list: each entry by the part of its `type`, with the part that offers it. */
  #compile(pricing: readonly GatePricingEntry[], where: string): CompiledRoute["entries"] {
    const parts = this.#parts;
    const offers = pricing.map((entry, index): SchemeOffer => {
      const compiler = parts.compilers.get(entry.type);
      if (compiler?.part.compile === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          `paymentGate options: ${where}[${index}]: no registered scheme prices type "${entry.type}" (known: ${[...parts.compilers.keys()].join(", ")})`,
        );
      }
      return compiler.part.compile(entry as SchemePricingInput, `${where}[${index}]`);
    });
    return offers.map((offer, index) => {
      const part = parts.byId.get(offer.scheme);
      if (part?.offer === undefined) {
        throw new TollgateError(
          "InvalidRequest",
          `paymentGate options: ${where}[${index}]: scheme "${offer.scheme}" has no gate part that offers it`,
        );
      }
      return { offer, part: part as CompiledRoute["entries"][number]["part"] };
    });
  }

  #toRoute(route: Exclude<RouteConfig, undefined>, where: string): CompiledRoute {
    const parsed = parseGateOptions(RouteConfigSchema, route, where);
    const pricing: GatePricingEntry[] =
      parsed.pricing ??
      (parsed.amount !== undefined
        ? [{ type: "one-time", amount: parsed.amount }]
        : [{ type: "one-time", price: parsed.price as string }]);
    const entries = this.#compile(pricing, where);
    if (parsed.units !== undefined && !entries.some((entry) => isPlanOffer(entry.offer))) {
      throw new TollgateError(
        "InvalidRequest",
        `paymentGate options: ${where}: metered \`units\` need subscription pricing on the route`,
      );
    }
    return {
      entries,
      acceptors: acceptorsOf(this.#parts, entries, parsed.units),
      description: parsed.description ?? this.#description,
      mimeType: parsed.mimeType,
    };
  }
}

/** What a part's `compile` is given. */
type SchemePricingInput = Readonly<Record<string, unknown>> & { type: string };

/** Whether an offer is a plan (the subscription scheme's offers carry a `planId`). */
function isPlanOffer(offer: SchemeOffer): boolean {
  return typeof (offer as { planId?: unknown }).planId === "string";
}

/** Builds every scheme's gate part for one gate, once. */
export function buildParts(
  schemes: readonly {
    id: SchemeId;
    gate?:
      | {
          pricingTypes: readonly string[];
          accepts?: readonly SchemeId[];
          create(c: GateSchemeContext): GateScheme;
        }
      | undefined;
  }[],
  context: GateSchemeContext,
): GateParts {
  const byId = new Map<SchemeId, GateScheme>();
  const compilers = new Map<string, { id: SchemeId; part: GateScheme }>();
  const accepting: { part: Acceptor["part"]; takes: ReadonlySet<SchemeId> }[] = [];
  for (const scheme of schemes) {
    if (scheme.gate === undefined) continue;
    const part = scheme.gate.create(context);
    byId.set(scheme.id, part);
    for (const type of scheme.gate.pricingTypes) compilers.set(type, { id: scheme.id, part });
    if (part.accept !== undefined && part.credential !== undefined) {
      accepting.push({
        part: part as Acceptor["part"],
        takes: new Set(scheme.gate.accepts ?? [scheme.id]),
      });
    }
  }
  return { byId, compilers, accepting };
}

/** The parts that accept credentials for a route's offers, each with its offers there, in precedence order. */
function acceptorsOf(
  parts: GateParts,
  entries: CompiledRoute["entries"],
  units: SchemeRoute["units"],
): Acceptor[] {
  const all = entries.map((entry) => entry.offer);
  const acceptors: Acceptor[] = [];
  for (const { part, takes } of parts.accepting) {
    const offers = all.filter((offer) => takes.has(offer.scheme));
    if (offers.length > 0) acceptors.push({ part, route: { offers, all, units } });
  }
  return acceptors;
}

function routeOf(
  parts: GateParts,
  entries: CompiledRoute["entries"],
  description: string | undefined,
): CompiledRoute {
  return { entries, acceptors: acceptorsOf(parts, entries, undefined), description, mimeType: undefined };
}

function routeResolverOf(
  routes: Record<string, RouteConfig> | ((request: RouteRequest) => RouteConfig | undefined) | undefined,
  fallback: CompiledRoute | undefined,
  toRoute: (route: RouteConfig, where: string) => CompiledRoute,
  staticRoutes: CompiledRoute[],
): (request: RouteRequest) => CompiledRoute | undefined {
  // CORS preflights carry no payment; pricing them by default would break browsers.
  const byDefault = (request: RouteRequest) => (request.method === "OPTIONS" ? undefined : fallback);
  if (routes === undefined) return byDefault;
  if (typeof routes === "function") {
    // A resolver usually returns a few constant objects: compile each once.
    const compiled = new WeakMap<object, CompiledRoute>();
    return (request) => {
      const route = routes(request);
      if (route === undefined) return byDefault(request);
      let hit = compiled.get(route);
      if (hit === undefined) {
        hit = toRoute(route, `routes(${request.method} ${request.path})`);
        compiled.set(route, hit);
      }
      return hit;
    };
  }
  const table = Object.entries(routes).map(([pattern, route]) => {
    let compiledPattern: ReturnType<typeof compileRoutePattern>;
    try {
      compiledPattern = compileRoutePattern(pattern);
    } catch (cause) {
      throw new TollgateError("InvalidRequest", `paymentGate options: routes: ${(cause as Error).message}`, {
        cause,
      });
    }
    const compiled = toRoute(route, `routes[${JSON.stringify(pattern)}]`);
    staticRoutes.push(compiled);
    return { pattern: compiledPattern, route: compiled };
  });
  return (request) => {
    for (const entry of table) if (entry.pattern.matches(request.method, request.path)) return entry.route;
    return byDefault(request);
  };
}
