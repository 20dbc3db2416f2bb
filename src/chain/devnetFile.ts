/**
 * `.tollgate/devnet.json`: how `tollgate devnet up` describes the chain it started, so that other
 * commands (the facilitator, plans, sellers, the demo) find it without flags. It holds the accounts'
 * private keys (and the facilitator's gas key is one of them), so it is its owner's only: 0600 in a
 * 0700 directory, tightened when read if an older version left it readable.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { z } from "zod";
import { ensurePrivateDir, tightenPrivateFile, writePrivateFile } from "../store/privateFiles.ts";
import type { Devnet } from "./startDevnet.ts";

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
    /** Absent in files written before channels existed. */
    channels: AddressSchema.optional(),
  }),
  accounts: z.array(z.object({ address: AddressSchema, privateKey: HexSchema })),
  /**
   * The settlement token at `contracts.usd` with its EIP-712 domain as read from the chain; absent in files
   * written before devnets recorded it (whose token's domain is read from the chain instead).
   */
  token: z.object({ kind: z.enum(["usdc"]), name: z.string(), version: z.string() }).optional(),
});
export type DevnetFile = z.infer<typeof DevnetFileSchema>;

/** The devnet description under `dir` (default `.tollgate`), or `undefined` when there is none. */
export function readDevnetFile(dir = ".tollgate"): DevnetFile | undefined {
  const file = join(dir, "devnet.json");
  if (!existsSync(file)) return undefined;
  tightenPrivateFile(file);
  return DevnetFileSchema.parse(JSON.parse(readFileSync(file, "utf8")));
}

/** The description of a running devnet; `pid` is the process that keeps its anvil alive. */
export function describeDevnet(
  devnet: Pick<Devnet, "rpcUrl" | "chain" | "network" | "contracts" | "accounts" | "token">,
  pid: number = process.pid,
): DevnetFile {
  return {
    rpcUrl: devnet.rpcUrl,
    chainId: devnet.chain.id,
    network: devnet.network,
    pid,
    contracts: devnet.contracts,
    accounts: devnet.accounts.map(({ address, privateKey }) => ({ address, privateKey })),
    token: devnet.token,
  };
}

/** Writes `file` (`<dir>/devnet.json`) 0600, creating its directory 0700. */
export function writeDevnetFile(file: string, description: DevnetFile): void {
  ensurePrivateDir(dirname(file));
  writePrivateFile(file, `${JSON.stringify(description, null, 2)}\n`);
}
