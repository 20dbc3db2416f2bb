/**
 * Builds the `tollgate` command line into plain JavaScript (`npm run build` → `dist/tollgate.js`), for
 * deployments: `node dist/tollgate.js facilitator` runs without tsx. Through tsx, Node 20 runs the
 * TypeScript hooks in a thread of their own (a second V8 heap, never given back) and every one of the
 * ~1 800 modules a facilitator loads costs more; the built CLI starts faster and rests in less memory
 * (docs/facilitator.md, "At rest"). The development commands (`npm run tollgate`, `bin/tollgate.js`)
 * keep running the sources.
 *
 * One entry holds the command table (each command a chunk of its own, loaded when it runs, as
 * `main.ts` does from the files); packages stay imports of `node_modules`. Every output file sits
 * directly in the output directory, and each source module's `import.meta.url` is rewritten to its own
 * file's URL seen from there, so a module that finds files beside it (migrations, dashboard assets)
 * finds them in `src/` as it does when run from source.
 */
import { readFileSync, rmSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build, type Plugin } from "esbuild";
import { commandNamesIn, readCommandSummaries } from "./runCli.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const commandsDir = join(root, "src/cli/commands");
const ENTRY = "tollgate-cli-entry";

/** The entry: the command table, each command imported when it runs, and their summaries. */
function entrySource(): string {
  const dir = pathToFileURL(`${commandsDir}/`);
  const names = commandNamesIn(dir);
  const table = names
    .map(
      (name) =>
        `  ${JSON.stringify(name)}: () => import(${JSON.stringify(`./src/cli/commands/${name}.ts`)}),`,
    )
    .join("\n");
  const summaries = readCommandSummaries(dir, names);
  return [
    `import { runCliProcess } from "./src/cli/runCli.ts";`,
    `runCliProcess(process.argv.slice(2), {\n${table}\n}, ${JSON.stringify(summaries)});`,
  ].join("\n");
}

/** Each source module's `import.meta.url` as the URL of its own file, from wherever its chunk is. */
function sourceUrls(outDir: string): Plugin {
  return {
    name: "tollgate-source-urls",
    setup(b) {
      b.onResolve({ filter: new RegExp(`^${ENTRY}$`) }, () => ({ path: ENTRY, namespace: "tollgate" }));
      b.onLoad({ filter: /.*/, namespace: "tollgate" }, () => ({
        contents: entrySource(),
        loader: "ts",
        resolveDir: root,
      }));
      b.onLoad({ filter: /\.ts$/ }, (args) => {
        const source = readFileSync(args.path, "utf8");
        if (!source.includes("import.meta.url")) return undefined;
        const fromOut = relative(outDir, args.path).split(sep).join("/");
        return {
          contents: source.replaceAll(
            "import.meta.url",
            `new URL(${JSON.stringify(fromOut)}, import.meta.url).href`,
          ),
          loader: "ts",
        };
      });
    },
  };
}

/** Builds the CLI into `outDir` (emptied first); resolves with the entry file's path. */
export async function bundleCli(outDir: string = join(root, "dist")): Promise<string> {
  const out = resolve(outDir);
  rmSync(out, { recursive: true, force: true });
  await build({
    entryPoints: { tollgate: ENTRY },
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    packages: "external",
    outdir: out,
    chunkNames: "[name]-[hash]",
    sourcemap: "linked",
    logLevel: "warning",
    plugins: [sourceUrls(out)],
  });
  return join(out, "tollgate.js");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const entry = await bundleCli(process.argv[2]);
  console.log(`built ${relative(process.cwd(), entry)}: node ${relative(process.cwd(), entry)} <command>`);
}
