import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { PostgresNotifications } from "./postgresNotifications.ts";

const databaseUrl = process.env.DATABASE_URL;

/** A TCP relay to the PostgreSQL server that can be cut (every connection ended, new ones refused) and restored. */
async function relay(
  target: URL,
): Promise<{ url: string; cut(): Promise<void>; restore(): Promise<void>; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;
  const listen = () =>
    new Promise<void>((resolve) => {
      server = createServer((client) => {
        const upstream = connect(Number(target.port || 5432), target.hostname);
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on("close", () => sockets.delete(s));
          s.on("error", () => s.destroy());
        }
        client.pipe(upstream).pipe(client);
      });
      server.listen(port, "127.0.0.1", () => {
        port = (server!.address() as { port: number }).port;
        resolve();
      });
    });
  const stop = () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server?.close(() => resolve());
    });
  await listen();
  const url = new URL(target.href);
  url.hostname = "127.0.0.1";
  url.port = String(port);
  return { url: url.href, cut: stop, restore: listen, close: stop };
}

describe.runIf(databaseUrl)("PostgresNotifications", () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it("keeps reconnecting while the server refuses, then listens again and tells every listener", async () => {
    const link = await relay(new URL(databaseUrl!));
    cleanups.push(() => link.close());
    const notifications = new PostgresNotifications({ databaseUrl: link.url, reconnectMs: 20 });
    cleanups.push(() => notifications.close());
    let told = 0;
    await notifications.listen("tollgate_reconnect_test", () => {
      told += 1;
    });
    await link.cut();
    // Several reconnects are refused while the relay is down (each one used to be the last).
    await new Promise((resolve) => setTimeout(resolve, 200));
    await link.restore();
    const deadline = Date.now() + 10_000;
    while (told === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(told).toBeGreaterThan(0);
    // Listening again: a notification sent now reaches the listener.
    const before = told;
    const pg = (await import("pg")).default;
    const sender = new pg.Client({ connectionString: databaseUrl });
    await sender.connect();
    await sender.query("NOTIFY tollgate_reconnect_test");
    await sender.end();
    while (told === before && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(told).toBeGreaterThan(before);
  });
});
