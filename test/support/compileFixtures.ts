/**
 * Compiles Solidity fixtures of the tests' own (test/fixtures/*.sol) with solc-js, the compiler and
 * settings the project's contracts use, so a suite can deploy hostile contracts without committed
 * artifacts. `@openzeppelin/…` imports resolve from node_modules.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Abi, Hex } from "viem";
import { solcSettings } from "../../src/chain/contracts/contractSources.ts";

type Solc = {
  compile(
    input: string,
    callbacks?: { import(path: string): { contents: string } | { error: string } },
  ): string;
};
type SolcOutput = {
  errors?: { severity: string; formattedMessage: string }[];
  contracts?: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string } } }>>;
};

const fixturesDir = join(dirname(fileURLToPath(import.meta.url)), "..", "fixtures");
const require = createRequire(import.meta.url);

export type CompiledFixture = { abi: Abi; bytecode: Hex };

/** Every contract of `test/fixtures/<file>`, by name. Throws with solc's messages on an error. */
export function compileFixture(file: string): Record<string, CompiledFixture> {
  const solc = require("solc") as Solc;
  const input = {
    language: "Solidity",
    sources: { [file]: { content: readFileSync(join(fixturesDir, file), "utf8") } },
    settings: solcSettings,
  };
  const output = JSON.parse(
    solc.compile(JSON.stringify(input), {
      import(path) {
        try {
          const resolved = path.startsWith("@") ? require.resolve(path) : join(fixturesDir, path);
          return { contents: readFileSync(resolved, "utf8") };
        } catch (error) {
          return { error: String(error) };
        }
      },
    }),
  ) as SolcOutput;
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length > 0) throw new Error(`solc failed:\n${errors.map((e) => e.formattedMessage).join("\n")}`);
  const compiled: Record<string, CompiledFixture> = {};
  for (const [name, contract] of Object.entries(output.contracts?.[file] ?? {})) {
    compiled[name] = { abi: contract.abi, bytecode: `0x${contract.evm.bytecode.object}` };
  }
  return compiled;
}
