/**
 * A loopback TCP proxy a test can cut and restore, to take a real RPC endpoint away from the code under
 * test and give it back (the endpoint itself keeps running, with its state).
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export type TcpProxy = {
  url: string;
  /** Refuses new connections and drops open ones. */
  cut(): Promise<void>;
  /** Accepts connections again on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
};

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;

  const listen = () =>
    new Promise<void>((resolve, reject) => {
      const s = createServer((client) => {
        const upstream = connect(target.port, target.host);
        sockets.add(client);
        sockets.add(upstream);
        client.pipe(upstream).pipe(client);
        const drop = () => {
          client.destroy();
          upstream.destroy();
          sockets.delete(client);
          sockets.delete(upstream);
        };
        client.on("error", drop).on("close", drop);
        upstream.on("error", drop).on("close", drop);
      });
      s.once("error", reject);
      s.listen(port, "127.0.0.1", () => {
        const address = s.address();
        if (address !== null && typeof address === "object") port = address.port;
        server = s;
        resolve();
      });
    });

  const stop = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
      if (server === undefined) return resolve();
      server.close(() => resolve());
      server = undefined;
    });

  await listen();
  return {
    url: `http://127.0.0.1:${port}`,
    cut: stop,
    restore: listen,
    close: stop,
  };
}
