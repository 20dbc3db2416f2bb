/**
 * Serving a Hono app on a local port: what the facilitator, the market, the dashboard and the demo's
 * sellers all start with. A port already taken is a clear `InvalidRequest`, not an `EADDRINUSE` stack.
 */
import { serve } from "@hono/node-server";
import type { Hono } from "hono";
import { TollgateError } from "../protocol/errors.ts";

export type RunningServer = { url: string; port: number; close(): Promise<void> };

/** Binds a Hono app to a loopback port (0 = a free one). */
export function serveApp(
  app: Pick<Hono, "fetch">,
  options: { port?: number; hostname?: string } = {},
): Promise<RunningServer> {
  const hostname = options.hostname ?? "127.0.0.1";
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, port: options.port ?? 0, hostname }, (info) => {
      resolve({
        url: `http://${hostname}:${info.port}`,
        port: info.port,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            // Keep-alive sockets would hold close() open; end them.
            (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
          }),
      });
    });
    server.once("error", (error: NodeJS.ErrnoException) => {
      reject(
        error.code === "EADDRINUSE"
          ? new TollgateError("InvalidRequest", `port ${options.port} on ${hostname} is already in use`, {
              details: { reason: "port_in_use", port: options.port, hostname },
              cause: error,
            })
          : error,
      );
    });
  });
}
