/**
 * `tollgate demo` (`npm run demo`): the whole system on an embedded devnet — see agents/demo.ts.
 * Ctrl-C stops everything the demo started.
 */
import { runDemo } from "../../../agents/demo.ts";

export const summary = "run the end-to-end demo: specialists, a budgeted research agent, renewals, webhooks";

export async function run(_argv: string[]): Promise<number> {
  const controller = new AbortController();
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
    await runDemo({ env: process.env, signal: controller.signal });
    if (controller.signal.aborted) {
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
