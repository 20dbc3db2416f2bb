/**
 * `<Tollgate dir>/deployment-<chain id>.json`: what `tollgate deploy` put on a chain (or found there), so
 * that `tollgate facilitator` takes the token, its EIP-712 domain and the contract addresses from it.
 * It holds no secret: no key, and no RPC URL (those often carry a provider's API key). Written
 * atomically (a temporary file renamed over it), so a reader never sees half of one.
 */
import { existsSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { AddressSchema, Hex32Schema } from "../protocol/address.ts";
import { TollgateError } from "../protocol/errors.ts";
import { chainIdOf, NetworkSchema } from "../protocol/network.ts";
import { summarizeIssues } from "../protocol/parseWire.ts";
import { ensurePrivateDir, writePrivateFile } from "../store/privateFiles.ts";

const ContractsSchema = z.object({
  batchSettler: AddressSchema,
  subscriptionManager: AddressSchema,
  /** TollgateChannels. */
  channels: AddressSchema,
});

/** Which contract a deployment transaction created. */
export const DeployedContractSchema = z.enum(["batchSettler", "subscriptionManager", "channels", "token"]);
export type DeployedContract = z.infer<typeof DeployedContractSchema>;

export const DeploymentFileSchema = z
  .object({
    version: z.literal(1),
    network: NetworkSchema,
    chainId: z.number().int().positive(),
    /** The settlement token and the EIP-712 domain its `name()`/`version()` returned. */
    token: z.object({
      address: AddressSchema,
      name: z.string().min(1),
      version: z.string().min(1),
      symbol: z.string(),
      decimals: z.number().int().min(0).max(255),
      /** `test`: a FiatToken `tollgate deploy --test-token` deployed, owned by the deployer (devnets only). */
      kind: z.enum(["network", "test"]),
    }),
    contracts: ContractsSchema,
    /** keccak256 of each contract's runtime code, as checked at its address. */
    codeHashes: z.object({
      batchSettler: Hex32Schema,
      subscriptionManager: Hex32Schema,
      channels: Hex32Schema,
    }),
    /** The CREATE2 salt given to the deterministic-deployment proxy. */
    salt: Hex32Schema,
    /** The account that ran the deployment that wrote this file. */
    deployer: AddressSchema,
    /** When this file was written (ISO 8601). */
    deployedAt: z.iso.datetime(),
    /** The transactions sent, in order, by this and earlier runs (empty when everything was there already). */
    transactions: z.array(
      z.object({ contract: DeployedContractSchema, address: AddressSchema, hash: Hex32Schema }),
    ),
  })
  .refine((file) => chainIdOf(file.network) === file.chainId, {
    error: "network and chainId name different chains",
    path: ["chainId"],
  });
export type DeploymentFile = z.infer<typeof DeploymentFileSchema>;

/** `<dir>/deployment-<chainId>.json`. */
export function deploymentFilePath(dir: string, chainId: number): string {
  return join(dir, `deployment-${chainId}.json`);
}

/**
 * Parses a deployment file. Throws `InvalidRequest` naming the file and what is wrong with it; returns
 * `undefined` when it does not exist.
 */
export function readDeploymentFile(file: string): DeploymentFile | undefined {
  if (!existsSync(file)) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new TollgateError("InvalidRequest", `${file} is not JSON: ${(error as Error).message}`, {
      details: { file },
      cause: error,
    });
  }
  const parsed = DeploymentFileSchema.safeParse(json);
  if (parsed.success) return parsed.data;
  const issues = summarizeIssues(parsed.error.issues);
  throw new TollgateError(
    "InvalidRequest",
    `${file} is not a Tollgate deployment file: ${issues.map((i) => `${i.path}: ${i.message}`).join("; ")}`,
    { details: { file, issues } },
  );
}

/** Writes `deployment` to `file` atomically, creating its directory (0700, like the rest of the Tollgate directory). */
export function writeDeploymentFile(file: string, deployment: DeploymentFile): void {
  const checked = DeploymentFileSchema.parse(deployment);
  ensurePrivateDir(join(file, ".."));
  const temporary = `${file}.${process.pid}.tmp`;
  writePrivateFile(temporary, `${JSON.stringify(checked, null, 2)}\n`);
  renameSync(temporary, file);
}
