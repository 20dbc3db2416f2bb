/**
 * `tollgate demo` (`npm run demo`): the whole system on an embedded devnet — see agents/demo.ts.
 * Ctrl-C stops everything the demo started.
 */
import { setMaxListeners } from "node:events";
import { parseArgs } from "node:util";

export const summary = "run the end-to-end demo: specialists, a budgeted research agent, renewals, webhooks";

const usage = `usage: tollgate demo [--keep]
  Runs the whole system on an embedded devnet, in this process, and stops it all at the end (about a
  minute): a facilitator, a market and five specialist sellers, and a research agent that buys their
  paid tools under a budget (one-time, subscription, metered, and from a reseller), then a month of
  chain time with renewals and the providers' webhooks. It keeps everything in memory and writes no files.
  It prints the dashboard's address once it answers (docs/dashboard.md); the dashboard stops with the
  demo, and --keep keeps everything running after it, so the dashboard can be browsed, until Ctrl-C.
environment: OPENAI_API_KEY OPENAI_BASE_URL OPENAI_MODEL TOLLGATE_PLANNER (the rule planner, offline, without
             a key) LOG_LEVEL (default silent)`;

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { help: { type: "boolean", short: "h" }, keep: { type: "boolean" } },
  });
  if (values.help === true) {
    console.log(usage);
    return 0;
  }
  if (positionals.length > 0) {
    console.error(`tollgate demo: takes no arguments\n${usage}`);
    return 2;
  }
  // Loaded only to run it: the demo pulls in LangChain and every service.
  const { runDemo } = await import("../../../agents/demo.ts");
  const controller = new AbortController();
  // Every tool call waiting in the run's queue listens for the abort: dozens at once are expected.
  setMaxListeners(0, controller.signal);
  // Kept installed until everything is stopped: Ctrl-C reaches this process both from the terminal
  // and relayed by tsx, and a signal with no listener left would end the process before the cleanup.
  const interrupt = () => {
    if (controller.signal.aborted) return;
    console.log("\ninterrupted: stopping everything the demo started…");
    controller.abort();
  };
  process.on("SIGINT", interrupt);
  process.on("SIGTERM", interrupt);
  const started = Date.now();
  try {
    const keep = values.keep === true;
    await runDemo({ env: process.env, signal: controller.signal, keep });
    // With --keep, Ctrl-C after the demo is how it ends.
    if (controller.signal.aborted && !keep) {
      setTimeout(() => process.exit(130), 500).unref();
      return 130;
    }
    console.log(`\nDemo finished in ${((Date.now() - started) / 1000).toFixed(1)} s.`);
    return 0;
  } catch (error) {
    if (controller.signal.aborted) {
      // Everything the demo started is stopped; a request cut off mid-way may still hold a socket
      // open, so do not wait for the event loop to drain.
      setTimeout(() => process.exit(130), 500).unref();
      return 130;
    }
    throw error;
  } finally {
    process.off("SIGINT", interrupt);
    process.off("SIGTERM", interrupt);
  }
}
