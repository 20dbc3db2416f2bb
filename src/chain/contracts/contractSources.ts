/**
 * The Solidity inputs of Tollgate's contracts and their content hash. The build records the hash in each
 * committed artifact; `artifacts.test.ts` recomputes it, so an edited `.sol` file (or a changed
 * OpenZeppelin or solc version) with unregenerated artifacts fails the suite.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, posix } from "node:path";
import { fileURLToPath } from "node:url";

/** The contracts Tollgate builds, in deployment order. */
export const contractNames = ["SubscriptionManager", "BatchSettler", "TollgateChannels"] as const;
export type ContractName = (typeof contractNames)[number];

/** Compiler settings; part of the hash, so changing them marks the artifacts stale. */
export const solcSettings = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "cancun",
  outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
} as const;

const contractsDir = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

/** Reads one source unit: our own files by bare name, `@openzeppelin/…` from node_modules. */
function readSource(path: string): string {
  if (path.startsWith("@")) return readFileSync(require.resolve(path), "utf8");
  return readFileSync(join(contractsDir, path), "utf8");
}

const importPattern = /^\s*import\s+(?:[^"';]*\s+from\s+)?["']([^"']+)["']\s*;/gm;

/** Every source unit the contracts need, keyed by solc's unit name, in sorted order (import closure). */
export function loadContractSources(): Record<string, string> {
  const found = new Map<string, string>();
  const pending: string[] = contractNames.map((name) => `${name}.sol`);
  while (pending.length > 0) {
    const unit = pending.pop()!;
    if (found.has(unit)) continue;
    const content = readSource(unit);
    found.set(unit, content);
    for (const match of content.matchAll(importPattern)) {
      const target = match[1]!;
      pending.push(
        target.startsWith(".") ? posix.normalize(posix.join(posix.dirname(unit), target)) : target,
      );
    }
  }
  return Object.fromEntries([...found.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** sha256 over the compiler version, the settings and every source unit (name and content). */
export function hashContractSources(compilerVersion: string, sources: Record<string, string>): `0x${string}` {
  const hash = createHash("sha256");
  hash.update(JSON.stringify({ compilerVersion, settings: solcSettings }));
  for (const [unit, content] of Object.entries(sources)) {
    hash.update(`\0${unit}\0${content}`);
  }
  return `0x${hash.digest("hex")}`;
}
