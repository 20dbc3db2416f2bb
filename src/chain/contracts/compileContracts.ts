/**
 * Compiles Tollgate's contracts with solc-js (the npm `solc` package) from the sources
 * `loadContractSources` gathers; no network, no native compiler.
 */
import { createRequire } from "node:module";
import {
  type ContractName,
  contractNames,
  hashContractSources,
  loadContractSources,
  solcSettings,
} from "./contractSources.ts";

type Solc = { version(): string; compile(input: string): string };

export type CompiledContract = { abi: unknown[]; bytecode: `0x${string}` };
export type CompileResult = {
  compilerVersion: string;
  sourceHash: `0x${string}`;
  contracts: Record<ContractName, CompiledContract>;
};

type SolcOutput = {
  errors?: { severity: "error" | "warning" | "info"; formattedMessage: string }[];
  contracts?: Record<string, Record<string, { abi: unknown[]; evm: { bytecode: { object: string } } }>>;
};

/** The solc-js version string, e.g. `0.8.30+commit.73712a01.Emscripten.clang`. */
export function solcVersion(): string {
  const solc = createRequire(import.meta.url)("solc") as Solc;
  return solc.version();
}

/** Compiles every contract; throws with solc's messages on any compile error. */
export function compileContracts(): CompileResult {
  const solc = createRequire(import.meta.url)("solc") as Solc;
  const sources = loadContractSources();
  const input = {
    language: "Solidity",
    sources: Object.fromEntries(Object.entries(sources).map(([unit, content]) => [unit, { content }])),
    settings: solcSettings,
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input))) as SolcOutput;
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length > 0) {
    throw new Error(`solc failed:\n${errors.map((e) => e.formattedMessage).join("\n")}`);
  }
  const contracts = {} as Record<ContractName, CompiledContract>;
  for (const name of contractNames) {
    const compiled = output.contracts?.[`${name}.sol`]?.[name];
    if (compiled === undefined) throw new Error(`solc produced no output for ${name}`);
    contracts[name] = { abi: compiled.abi, bytecode: `0x${compiled.evm.bytecode.object}` };
  }
  const compilerVersion = solc.version();
  return { compilerVersion, sourceHash: hashContractSources(compilerVersion, sources), contracts };
}

/** Warnings solc reported, for the build script to show. */
export type { SolcOutput };
