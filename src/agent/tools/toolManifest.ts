/**
 * The pluggable tool format: one JSON file per tool, `<name>.json` in a tools directory, loadable by
 * name. A local tool runs a capability (or a LangChain tool) exported by a module; a remote tool names
 * a capability a specialist sells, found through its manifest URL or a market, and becomes a paid tool.
 */
import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import { CapabilityNameSchema } from "../../protocol/manifest.ts";
import { HttpUrlSchema } from "../../protocol/paymentRequired.ts";
import { UsdcTextSchema } from "./capability.ts";

/** A tool name is a capability name: 1–64 of `[a-zA-Z0-9_-]`, so it is also a safe file name. */
export const ToolNameSchema = CapabilityNameSchema;

const DescriptionSchema = z.string().min(1).max(2000);

/** `{ "kind": "local", "name": "summarize", "module": "../agents/summarizer.ts", "export": "summarizer" }` */
export const LocalToolManifestSchema = z.strictObject({
  kind: z.literal("local"),
  name: ToolNameSchema,
  /** Replaces the capability's own description for the model and planner. */
  description: DescriptionSchema.optional(),
  /** The module, relative to the manifest's directory. */
  module: z
    .string()
    .min(1)
    .max(500)
    .regex(/^\.{1,2}\/.+\.(ts|mts|js|mjs)$/, {
      error: 'expected a relative module path such as "./wordStats.ts"',
    }),
  /** The named export: a capability (`defineCapability`) or a LangChain structured tool. */
  export: z.string().regex(/^[A-Za-z_$][A-Za-z0-9_$]*$/, { error: "expected an export name" }),
});
export type LocalToolManifest = z.infer<typeof LocalToolManifestSchema>;

/**
 * `{ "kind": "remote", "name": "brief", "capability": "brief",
 *    "manifestUrl": "http://127.0.0.1:4031/.well-known/tollgate.json", "maxPrice": "0.05" }`
 * or with `"market": "http://127.0.0.1:4030"` (and optionally `"seller": "0x…"`) instead of `manifestUrl`.
 */
export const RemoteToolManifestSchema = z
  .strictObject({
    kind: z.literal("remote"),
    name: ToolNameSchema,
    description: DescriptionSchema.optional(),
    /** The capability's name in the seller's manifest. */
    capability: CapabilityNameSchema,
    /** A specialist's discovery document (`/.well-known/tollgate.json`). */
    manifestUrl: HttpUrlSchema.optional(),
    /** A market registry to find a seller of `capability` in. */
    market: HttpUrlSchema.optional(),
    /** With `market`: buy from this seller only. */
    seller: AddressSchema.optional(),
    /** The most one call may cost, in USDC (`"0.05"`); a dearer offer is refused. */
    maxPrice: UsdcTextSchema.optional(),
  })
  .refine((manifest) => (manifest.manifestUrl === undefined) !== (manifest.market === undefined), {
    error: "give exactly one of manifestUrl and market",
  })
  .refine((manifest) => manifest.seller === undefined || manifest.market !== undefined, {
    error: "seller needs market",
    path: ["seller"],
  });
export type RemoteToolManifest = z.infer<typeof RemoteToolManifestSchema>;

export const ToolManifestSchema = z.discriminatedUnion("kind", [
  LocalToolManifestSchema,
  RemoteToolManifestSchema,
]);
export type ToolManifest = z.infer<typeof ToolManifestSchema>;
