/**
 * `npm run bench`: runs every bench script in bench/ in turn, each in its own process (so one bench's
 * servers, devnets and JIT state cannot colour the next), and prints what each prints.
 * Helpers under bench/support/ are not benches. Names given on the command line pick benches:
 * `npm run bench -- gateProof paidRequests`.
 */
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const self = basename(fileURLToPath(import.meta.url));
const all = readdirSync(here, { withFileTypes: true })
  .filter((entry) => entry.isFile() && entry.name.endsWith(".ts") && entry.name !== self)
  .map((entry) => entry.name.slice(0, -".ts".length))
  .sort();
const wanted = process.argv.slice(2);
const unknown = wanted.filter((name) => !all.includes(name));
if (unknown.length > 0) {
  console.error(`unknown bench: ${unknown.join(", ")} (benches: ${all.join(", ")})`);
  process.exit(2);
}
const benches = wanted.length > 0 ? all.filter((name) => wanted.includes(name)) : all;

/**
 * Runs one bench with tsx, output straight to this terminal; resolves with its exit code. With
 * `--expose-gc`, benches that make garbage before a timed phase (gateProof's proofs) collect it first.
 */
function run(name: string): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--expose-gc", "--import", "tsx", join(here, `${name}.ts`)], {
      stdio: "inherit",
    });
    child.once("error", () => resolve(1));
    child.once("exit", (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
  });
}

const failed: string[] = [];
for (const name of benches) {
  console.log(`=== bench/${name}.ts`);
  const started = Date.now();
  const code = await run(name);
  console.log(
    `=== bench/${name}.ts ${code === 0 ? "done" : `FAILED (exit ${code})`} in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
  );
  if (code !== 0) failed.push(name);
}
if (failed.length > 0) {
  console.error(`failed: ${failed.join(", ")}`);
  process.exit(1);
}
