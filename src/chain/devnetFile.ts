/**
 * `.tollgate/devnet.json`: how `tollgate devnet up` describes the chain it started, so that other
 * commands (the facilitator, plans, sellers, the demo) find it without flags.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";

const HexSchema = z.string().regex(/^0x[0-9a-fA-F]*$/);
const AddressSchema = z.string().regex(/^0x[0-9a-fA-F]{40}$/);

/** `.tollgate/devnet.json`. The private keys are anvil's public dev keys, never real ones. */
export const DevnetFileSchema = z.object({
  rpcUrl: z.string().url(),
  chainId: z.number().int(),
  network: z.string(),
  pid: z.number().int().positive(),
  contracts: z.object({
    usd: AddressSchema,
    subscriptionManager: AddressSchema,
    batchSettler: AddressSchema,
  }),
  accounts: z.array(z.object({ address: AddressSchema, privateKey: HexSchema })),
});
export type DevnetFile = z.infer<typeof DevnetFileSchema>;

/** The devnet description under `dir` (default `.tollgate`), or `undefined` when there is none. */
export function readDevnetFile(dir = ".tollgate"): DevnetFile | undefined {
  const file = join(dir, "devnet.json");
  if (!existsSync(file)) return undefined;
  return DevnetFileSchema.parse(JSON.parse(readFileSync(file, "utf8")));
}
