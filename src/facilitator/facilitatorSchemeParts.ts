/**
 * How a scheme's facilitator part plugs in (docs/schemes.md, "The facilitator part"). The facilitator
 * builds the parts of its scheme list once, in list order, each with the shared context and the parts
 * built before it (`metered` reads the `subscription` part's indexer); it mounts their routes, starts
 * their background work after the outbox and stops it in reverse order.
 *
 * Invariants:
 * - one part per scheme id: an entry of `createFacilitator({ schemes })` with the id of a built-in part
 *   replaces it (configured), any other is added after the built-in ones;
 * - a part's rate-limited paths get the per-client limit before any route is mounted;
 * - a part never sends a transaction itself: it enqueues calls in `context.outbox`.
 */
import type { Hono } from "hono";
import { TollgateError } from "../protocol/errors.ts";
import { SchemeIdSchema } from "../schemes/registry.ts";
import type { FacilitatorScheme, FacilitatorSchemeInstance, SchemeId } from "../schemes/types.ts";
import type { SchemeDashboard } from "./dashboard/schemeDashboard.ts";
import type { FacilitatorContext } from "./facilitatorContext.ts";

/** What a part's `create` is given: the facilitator's context and the parts built before it. */
export type FacilitatorSchemeContext = FacilitatorContext & {
  /** The part of `id` built before this one (list order), if the facilitator runs it. */
  part<T extends FacilitatorSchemeInstance = FacilitatorSchemeInstance>(id: SchemeId): T | undefined;
};

/** A part as the facilitator builds it: the scheme's id and what it contributes. */
export type FacilitatorPart = FacilitatorSchemeInstance & {
  /**
   * Paths that cost the facilitator chain reads or gas (`/authorize`, `/channels/*`): the per-client
   * rate limit (429 `RateLimited`) runs before them.
   */
  rateLimited?: readonly string[] | undefined;
  /** What the part adds to the dashboard, where the facilitator serves one (pages, answers). */
  dashboard?: SchemeDashboard | undefined;
};

/** A scheme's facilitator part, as `src/schemes/<id>/facilitator.ts` exports it. */
export type FacilitatorSchemePart = FacilitatorScheme<FacilitatorSchemeContext> & {
  create(context: FacilitatorSchemeContext): FacilitatorPart;
  /**
   * Served by every facilitator, also one built with `builtinModules: false` (`exact` and the x402
   * interop, which the core service has always answered). Default false.
   */
  readonly core?: boolean | undefined;
};

/**
 * Declares a facilitator part, checking its shape once.
 *
 * @example
 * export const toyFacilitator = defineFacilitatorScheme({ id: "toy", create: (ctx) => ({ routes(app) {…} }) });
 */
export function defineFacilitatorScheme<const P extends FacilitatorSchemePart>(part: P): P {
  const id = SchemeIdSchema.safeParse((part as { id?: unknown })?.id);
  if (!id.success || typeof part.create !== "function") {
    throw new TollgateError(
      "InvalidRequest",
      `facilitator scheme ${JSON.stringify((part as { id?: unknown })?.id)}: expected { id, create(context) }`,
    );
  }
  return part;
}

/**
 * The parts to build: `base` in order, an entry of `extra` with a base id in that id's place, the
 * others after. Throws `InvalidRequest` when `extra` names an id twice.
 */
export function facilitatorSchemeList(
  base: readonly FacilitatorSchemePart[],
  extra: readonly FacilitatorSchemePart[] = [],
): FacilitatorSchemePart[] {
  const byId = new Map<SchemeId, FacilitatorSchemePart>();
  for (const part of extra.map((p) => defineFacilitatorScheme(p))) {
    if (byId.has(part.id)) {
      throw new TollgateError("InvalidRequest", `schemes: facilitator part "${part.id}" is given twice`);
    }
    byId.set(part.id, part);
  }
  const list = base.map((part) => byId.get(part.id) ?? part);
  const baseIds = new Set(base.map((part) => part.id));
  return [...list, ...[...byId.values()].filter((part) => !baseIds.has(part.id))];
}

/** The built parts of one facilitator, in list order. */
export type BuiltFacilitatorSchemes = {
  readonly parts: ReadonlyMap<SchemeId, FacilitatorPart>;
  /** The paths every part rate-limits, for the app to guard before mounting routes. */
  readonly rateLimited: readonly string[];
  routes(app: Hono): void;
  start(): Promise<void>;
  stop(): Promise<void>;
};

/** Builds `list` (see `facilitatorSchemeList`) over one facilitator's context, once. */
export function buildFacilitatorSchemes(
  context: FacilitatorContext,
  list: readonly FacilitatorSchemePart[],
): BuiltFacilitatorSchemes {
  const parts = new Map<SchemeId, FacilitatorPart>();
  const schemeContext: FacilitatorSchemeContext = {
    ...context,
    part: <T extends FacilitatorSchemeInstance>(id: SchemeId) => parts.get(id) as T | undefined,
  };
  for (const scheme of list) parts.set(scheme.id, scheme.create(schemeContext));
  const started: FacilitatorPart[] = [];
  return {
    parts,
    rateLimited: [...new Set([...parts.values()].flatMap((part) => part.rateLimited ?? []))],
    routes(app) {
      for (const part of parts.values()) part.routes?.(app);
    },
    async start() {
      for (const part of parts.values()) {
        await part.start?.();
        started.push(part);
      }
    },
    async stop() {
      for (const part of started.reverse()) await part.close?.();
      started.length = 0;
    },
  };
}
