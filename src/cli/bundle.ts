/**
 * Builds the `tollgate` command line into plain JavaScript (`npm run build` → `dist/tollgate.js`), for
 * deployments: `node dist/tollgate.js facilitator` runs without tsx. Through tsx, Node 20 runs the
 * TypeScript hooks in a thread of their own (a second V8 heap, never given back) and every one of the
 * ~1 800 modules a facilitator loads costs more; the built CLI starts faster and rests in less memory
 * (docs/facilitator.md, "At rest"). `bin/tollgate.js` (`npx tollgate`) runs it while it is up to date;
 * `npm run tollgate` always runs the sources.
 *
 * One entry holds the command table (each command a chunk of its own, loaded when it runs, as
 * `main.ts` does from the files); packages stay imports of `node_modules`. Every output file sits
 * directly in the output directory, and each source module's `import.meta.url` is rewritten to its own
 * file's URL seen from there, so a module that finds files beside it (migrations, dashboard assets)
 * finds them in `src/` as it does when run from source.
 *
 * Beside the entry, `sources.json` names every source file the build read and when the build began:
 * `bin/tollgate.js` runs the build only while none of them changed since (a stat each, a few ms for
 * ~580 files), and the sources through tsx otherwise. It is written last, so a failed or half-written
 * build is never run. `npm install` builds it (the `prepare` script); a failed build there warns and
 * leaves the sources to tsx.
 */
import { readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build, type Plugin } from "esbuild";
import { z } from "zod";
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

/** What `bin/tollgate.js` reads to tell whether the build in its directory is older than its sources. */
export const BuildSourcesSchema = z.object({
  /** When the build began (ms since the epoch): a source modified since may not be in the build. */
  builtAt: z.number(),
  /** The files the build read, and the commands' directory (adding or removing a command changes its
   * mtime), relative to the output directory, `/`-separated. */
  sources: z.array(z.string()),
});
export type BuildSources = z.infer<typeof BuildSourcesSchema>;

/** Builds the CLI into `outDir` (emptied first); resolves with the entry file's path. */
export async function bundleCli(outDir: string = join(root, "dist")): Promise<string> {
  const out = resolve(outDir);
  rmSync(out, { recursive: true, force: true });
  const builtAt = Date.now();
  const { metafile } = await build({
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
    absWorkingDir: root,
    metafile: true,
    plugins: [sourceUrls(out)],
  });
  const fromOut = (path: string) => relative(out, join(root, path)).split(sep).join("/");
  const read = Object.keys(metafile.inputs).filter((input) => !input.startsWith("tollgate:"));
  const stamp: BuildSources = {
    builtAt,
    sources: [...read.map(fromOut), `${fromOut("src/cli/commands")}/`],
  };
  writeFileSync(join(out, "sources.json"), `${JSON.stringify(stamp)}\n`);
  return join(out, "tollgate.js");
}

/**
 * Whether `outDir` holds a whole build that no source changed since: the rule `bin/tollgate.js` applies
 * (in plain JavaScript there, since it runs before any TypeScript can), for benches and tests to know
 * which the bin will run.
 */
export function isBuildFresh(outDir: string = join(root, "dist")): boolean {
  try {
    const stamp = JSON.parse(readFileSync(join(outDir, "sources.json"), "utf8"));
    const { builtAt, sources } = BuildSourcesSchema.parse(stamp);
    return sources.every((source) => statSync(join(outDir, source)).mtimeMs < builtAt);
  } catch {
    return false;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const entry = await bundleCli(process.argv[2]);
  console.log(`built ${relative(process.cwd(), entry)}: node ${relative(process.cwd(), entry)} <command>`);
}
