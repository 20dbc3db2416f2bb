import { defineConfig } from "vitest/config";

/**
 * The fault suite (test/faults/, docs/reliability.md): real processes killed over and over, run apart
 * from `npm test` (whose config matches `*.test.ts`; these files are `*.fault.ts`) by
 * `npm run test:faults`. TOLLGATE_FAULTS_LONG=1 runs the long variant.
 */
export default defineConfig({
  test: {
    include: ["test/faults/**/*.fault.ts"],
    testTimeout: 900_000,
    hookTimeout: 180_000,
    fileParallelism: false,
  },
});
