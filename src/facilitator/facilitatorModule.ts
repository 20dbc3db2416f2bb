/**
 * How the facilitator's features plug in. What a payment scheme does in the facilitator (`/authorize`,
 * x402, subscriptions, usage, channels) comes from its scheme part (facilitatorSchemeParts.ts); the
 * rest (providers, events, webhooks, analytics, dashboard) are modules: each gets the shared context, may mount routes and may run a
 * background worker that the facilitator starts and stops with itself.
 */
import type { Hono } from "hono";
import type { FacilitatorContext } from "./facilitatorContext.ts";
import type { FacilitatorSchemePart } from "./facilitatorSchemeParts.ts";

export type FacilitatorModule = {
  name: string;
  routes?(app: Hono): void;
  start?(): Promise<void>;
  stop?(): Promise<void>;
};

export type FacilitatorModuleFactory = ((context: FacilitatorContext) => FacilitatorModule) & {
  /**
   * Scheme facilitator parts this module carries (`createChannelsModule(options)`): the facilitator
   * builds them with its scheme list, each in place of the built-in part of its id.
   */
  readonly schemes?: readonly FacilitatorSchemePart[] | undefined;
};

/** A module that only carries scheme parts. */
export type SchemeCarrierModule = FacilitatorModuleFactory & {
  readonly schemes: readonly FacilitatorSchemePart[];
};

/** A module named `name` whose work is that of the scheme parts it carries. */
export function carrierModule(name: string, schemes: readonly FacilitatorSchemePart[]): SchemeCarrierModule {
  return Object.assign(() => ({ name }), { schemes });
}
