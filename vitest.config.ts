import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { configDefaults, defineConfig } from "vitest/config";

const roots = ["src", "test", "examples", "agents"];
const include = roots.map((root) => `${root}/**/*.test.ts`);

/**
 * Test files that replace a module (`vi.mock`, `vi.doMock`): a module registry shared with other
 * files would hand them the real module, or hand theirs to the files after them, so they run in a
 * process of their own. Found by reading the files, so a new one needs no entry here.
 */
function filesMockingModules(): string[] {
  const found: string[] = [];
  for (const root of roots) {
    for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !entry.name.endsWith(".test.ts")) continue;
      const file = join(entry.parentPath, entry.name);
      if (file.includes("node_modules")) continue;
      if (/\bvi\.(?:do)?[mM]ock\(/.test(readFileSync(file, "utf8"))) found.push(file);
    }
  }
  return found;
}
const isolated = filesMockingModules();

export default defineConfig({
  test: {
    // Each integration file starts its own anvil; two cores, so keep files from starving each other.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: {
          name: "shared",
          include,
          exclude: [...configDefaults.exclude, ...isolated],
          // Files run one after another in a worker that keeps its module cache: importing viem,
          // LangChain and the store once per worker instead of once per file takes about a quarter
          // off the suite. Every file still starts and stops its own devnet and stores; a file that
          // leaves a timer or a connection behind shows in the files after it.
          isolate: false,
        },
      },
      ...(isolated.length === 0
        ? []
        : [{ extends: true as const, test: { name: "isolated", include: isolated } }]),
    ],
  },
});
