/**
 * How soon `tollgate` answers: `tollgate --help`, and `tollgate budget show` (the agent runtime's PGlite
 * store opened in a fresh directory holding one agent's budget), each run by `bin/tollgate.js` two ways
 * in the same run — from the build (`npm run build`, what `npm install` leaves in dist/) and from the
 * sources through tsx (what the bin falls back to without a build, or with one older than its sources).
 * Each timing is one process, spawned until it exits; the two ways alternate so that both see the same
 * load. Goals for the build: `--help` ≤ 0.3 s, `budget show` ≤ 0.5 s (median).
 *
 * When the tree has `tollgate up` (src/cli/commands/up.ts), it is timed too, both ways, on ports of its
 * own (`--port-offset`): a first start in an empty data directory, and a restart in the directory that
 * start left, each until it prints that it is ready (`Ready in`); then Ctrl-C (SIGINT), and the stop is
 * waited for, untimed. No goal: the devnet's and the stores' start dominate it.
 *
 * The bin is copied into two trees of its own in the repository (so packages resolve from its
 * node_modules): one with a build beside it, one with `src` linked and no build. A source changed during
 * the run (another editor in the checkout) makes the build stale: it is rebuilt before the next timing,
 * outside it, and the rebuilds are counted in the output.
 *
 *   npx tsx bench/cliStartup.ts [--runs 7] [--up-runs 3]
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { bundleCli, isBuildFresh } from "../src/cli/bundle.ts";
import { elapsedMs, fmt, percentile, ratio, table } from "./support/stats.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const { values } = parseArgs({
  options: { runs: { type: "string", default: "7" }, "up-runs": { type: "string", default: "3" } },
});

function count(flag: string, text: string | undefined): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} must be a whole number ≥ 1, not ${text}`);
  return n;
}
const RUNS = count("runs", values.runs);
const UP_RUNS = count("up-runs", values["up-runs"]);
const HAS_UP = existsSync(join(root, "src/cli/commands/up.ts"));
/** How long `tollgate up` may take to be ready, and to stop, before the bench gives up on it. */
const UP_TIMEOUT_MS = 180_000;

type Way = "built" | "tsx";
type Cell = { name: string; args: string[]; goalSeconds?: number };
type Samples = Map<string, Record<Way, number[]>>;

const cells: Cell[] = [
  { name: "tollgate --help", args: ["--help"], goalSeconds: 0.3 },
  { name: "tollgate budget show bench", args: ["budget", "show", "bench"], goalSeconds: 0.5 },
];

/** The two trees, the data directory, and how often the build went stale and was rebuilt. */
type Bench = { bins: Record<Way, string>; dist: string; dataDir: string; rebuilds: number };

/** A copy of bin/tollgate.js in `tree`, which runs whatever build or sources sit beside it. */
function placeBin(tree: string): string {
  mkdirSync(join(tree, "bin"), { recursive: true });
  const bin = join(tree, "bin/tollgate.js");
  copyFileSync(join(root, "bin/tollgate.js"), bin);
  return bin;
}

/** Runs `bin args` as its own process; resolves with the seconds it took, or rejects on a failure. */
function timeOnce(bench: Bench, bin: string, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    // Only these variables: a DATABASE_URL of the machine would move budget show off PGlite.
    const env = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", TOLLGATE_DIR: bench.dataDir };
    const child = spawn(process.execPath, [bin, ...args], { cwd: bench.dataDir, env, stdio: "pipe" });
    let stderr = "";
    child.stdout.resume();
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.once("error", reject);
    child.once("close", (code) => {
      const seconds = elapsedMs(started) / 1_000;
      if (code === 0) resolve(seconds);
      else reject(new Error(`tollgate ${args.join(" ")} exited ${code}: ${stderr}`));
    });
  });
}

/**
 * Before a timing of the build: rebuilds it, untimed, if a source was edited since. The built tree has
 * no sources, so a stale build the bin refused would fail the timing rather than time tsx unnoticed.
 */
async function ensureBuilt(bench: Bench, way: Way): Promise<void> {
  if (way === "built" && !isBuildFresh(bench.dist)) {
    await bundleCli(bench.dist);
    bench.rebuilds++;
  }
}

/** One timing of `cell` run `way`. */
async function sample(bench: Bench, way: Way, cell: Cell): Promise<number> {
  await ensureBuilt(bench, way);
  return timeOnce(bench, bench.bins[way], cell.args);
}

/** An empty set of timings for each of `names`. */
function samplesFor(names: string[]): Samples {
  return new Map(names.map((name) => [name, { built: [] as number[], tsx: [] as number[] }]));
}

/** Which way goes first in run `run`: they alternate, so neither always runs on the other's heels. */
const orderOf = (run: number): Way[] => (run % 2 === 0 ? ["built", "tsx"] : ["tsx", "built"]);

/** `RUNS` timings of each cell both ways. */
async function measure(bench: Bench): Promise<Samples> {
  const samples = samplesFor(cells.map((cell) => cell.name));
  for (let run = 0; run < RUNS; run++) {
    for (const cell of cells) {
      for (const way of orderOf(run)) samples.get(cell.name)![way].push(await sample(bench, way, cell));
    }
  }
  return samples;
}

/**
 * Starts `tollgate up` in `dir`; resolves with the seconds until it said it is ready, once it has
 * been stopped with SIGINT (as Ctrl-C does) and has exited, so that the next start finds its state saved.
 */
function timeUp(bin: string, dir: string, portOffset: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const env = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" };
    const args = [bin, "up", "--data-dir", dir, "--port-offset", String(portOffset)];
    const child = spawn(process.execPath, args, { cwd: dir, env, stdio: "pipe" });
    let output = "";
    let readySeconds: number | undefined;
    const timer = setTimeout(() => child.kill("SIGKILL"), UP_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (readySeconds === undefined && /^Ready in /m.test(output)) {
        readySeconds = elapsedMs(started) / 1_000;
        child.kill("SIGINT");
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("error", reject);
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      if (readySeconds !== undefined && code === 0) resolve(readySeconds);
      else
        reject(new Error(`tollgate up ended (${code ?? signal}) before it was ready and stopped: ${output}`));
    });
  });
}

const UP_FIRST = "tollgate up, first start (empty data dir)";
const UP_RESTART = "tollgate up, restart (same data dir)";

/** `UP_RUNS` first starts and restarts each way, each first start in a fresh directory. */
async function measureUp(bench: Bench): Promise<Samples> {
  const samples = samplesFor([UP_FIRST, UP_RESTART]);
  // Ports of its own, so that a stack running on the default ports (or another bench's) is left alone;
  // new ones for each fresh directory, so that no start waits for the last one's ports to be let go.
  let portOffset = 20_000 + Math.floor(Math.random() * 20_000);
  for (let run = 0; run < UP_RUNS; run++) {
    for (const way of orderOf(run)) {
      portOffset += 10;
      const dir = mkdtempSync(join(bench.dataDir, "up-"));
      for (const name of [UP_FIRST, UP_RESTART]) {
        try {
          await ensureBuilt(bench, way);
          samples.get(name)![way].push(await timeUp(bench.bins[way], dir, portOffset));
        } catch (error) {
          // A start that failed is reported and left out; the restart needs the first start's state.
          const lines = (error as Error).message.split("\n").filter((line) => line.trim() !== "");
          console.log(`${name}, ${way}, run ${run + 1}: ${lines.slice(-3).join(" / ")}`);
          break;
        }
      }
    }
  }
  return samples;
}

function report(samples: Samples, goals: readonly Cell[]): string {
  const rows = [...samples].map(([name, { built, tsx }]) => {
    const goal = goals.find((cell) => cell.name === name)?.goalSeconds;
    const [b, t] = [percentile(built, 50), percentile(tsx, 50)];
    const range = (xs: number[]) => `${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))}`;
    return [
      name,
      fmt(b),
      range(built),
      fmt(t),
      range(tsx),
      ratio(t, b),
      goal === undefined ? "-" : `≤ ${goal}`,
      goal === undefined ? "-" : b <= goal ? "yes" : "NO",
    ];
  });
  return table(
    ["command", "built s", "built min–max", "tsx s", "tsx min–max", "tsx/built", "goal s", "holds"],
    rows,
  );
}

/** What the bin's freshness check costs: sources.json read and every source stat'ed, in this process. */
function freshnessCheckMs(dist: string): number {
  const started = process.hrtime.bigint();
  isBuildFresh(dist);
  return elapsedMs(started);
}

const work = join(root, `.tmp-cli-startup-${randomBytes(4).toString("hex")}`);
const dataDir = mkdtempSync(join(tmpdir(), "tollgate-cli-startup-"));
try {
  const sourceTree = join(work, "source");
  const bins = { built: placeBin(join(work, "built")), tsx: placeBin(sourceTree) };
  symlinkSync(join(root, "src"), join(sourceTree, "src"), "dir");
  const bench: Bench = { bins, dist: join(work, "built/dist"), dataDir, rebuilds: 0 };
  await bundleCli(bench.dist);
  // budget show needs an agent with a budget; this also creates and migrates the store.
  await timeOnce(bench, bins.built, ["budget", "set", "bench", "--total", "10"]);
  const loadBefore = loadavg()[0]!;
  const samples = await measure(bench);
  console.log(
    `tollgate start-up through bin/tollgate.js, median of ${RUNS} runs each, built and through tsx ` +
      `alternating (load average ${fmt(loadBefore)} at the start, ${fmt(loadavg()[0]!)} at the end)`,
  );
  console.log(report(samples, cells));
  if (HAS_UP) {
    const upLoadBefore = loadavg()[0]!;
    const upSamples = await measureUp(bench);
    console.log(
      `\ntollgate up until ready, median of ${UP_RUNS} runs each, built and through tsx alternating ` +
        `(load average ${fmt(upLoadBefore)} at the start, ${fmt(loadavg()[0]!)} at the end)`,
    );
    console.log(report(upSamples, []));
  } else {
    console.log("\ntollgate up: not measured (src/cli/commands/up.ts does not exist in this tree)");
  }
  console.log(
    `\nthe bin's freshness check (sources.json, one stat per source): ${fmt(freshnessCheckMs(bench.dist))} ms; ` +
      `rebuilds during the run (a source edited meanwhile): ${bench.rebuilds}`,
  );
} finally {
  rmSync(work, { recursive: true, force: true });
  rmSync(dataDir, { recursive: true, force: true });
}
