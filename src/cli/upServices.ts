/**
 * The servers `tollgate up` runs beside its devnet and facilitator: the market (`tollgate market`, its
 * PGlite in `<dir>/market`) and, on the dashboard's usual port, a pointer to the one dashboard the
 * facilitator serves. Also the check that every service answers before the summary is printed.
 */
import { Hono } from "hono";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { type RunningServer, serveApp } from "../http/serveApp.ts";
import { systemClock } from "../protocol/clock.ts";
import { marketCommand } from "./commands/market.ts";

export type UpService = { url: string; stop(): Promise<void> };

/**
 * Runs `tollgate market` in this process on `port` over `<dir>/market`, until `stop()`; resolves once it
 * answers `/healthz`.
 */
export async function startUpMarket(
  dir: string,
  port: number,
  env: Record<string, string | undefined>,
  fetch: FetchFn,
): Promise<UpService> {
  let release = () => {};
  const stopped = new Promise<void>((done) => {
    release = done;
  });
  const lines: string[] = [];
  const out = { log: (line: string) => lines.push(line), error: (line: string) => lines.push(line) };
  const running = marketCommand(["serve", "--port", String(port), "--dir", dir], {
    env,
    out,
    fetch,
    clock: systemClock,
    untilStopped: () => stopped,
  });
  const url = `http://127.0.0.1:${port}`;
  // The command resolves early only when it refused to start (its reason is in `lines`).
  const ended = running.then((code) => {
    throw new Error(`the market did not start (exit ${code}): ${lines.join(" ")}`);
  });
  await Promise.race([waitUntilAnswers(`${url}/healthz`, fetch), ended]);
  ended.catch(() => {});
  return {
    url,
    stop: async () => {
      release();
      await running;
    },
  };
}

/** `http://127.0.0.1:<port>/` and `/dashboard…` sent on to the facilitator's dashboard. */
export async function startDashboardPointer(port: number, dashboardUrl: string): Promise<UpService> {
  const app = new Hono();
  app.all("*", (c) => c.redirect(`${dashboardUrl}/`, 302));
  const server: RunningServer = await serveApp(app, { port, hostname: "127.0.0.1" });
  return { url: server.url, stop: () => server.close() };
}

/** Resolves once `url` answers 2xx; throws after `timeoutMs`. */
export async function waitUntilAnswers(url: string, fetch: FetchFn, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) throw new Error(`${url} did not answer within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
