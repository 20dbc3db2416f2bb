/**
 * Work notifications of a PostgreSQL store: one connection of its own LISTENs for every channel of the
 * store, and reconnects (every second, for as long as the server refuses) when the server ends it,
 * telling every listener afterwards, since whatever was sent while no one listened is found by the
 * listeners' reads then.
 */
import pg from "pg";
import type { Logger } from "pino";

const quote = (channel: string) => `"${channel.replaceAll('"', '""')}"`;

export class PostgresNotifications {
  readonly #listeners = new Map<string, Set<() => void>>();
  #listener: pg.Client | undefined;
  #connecting: Promise<pg.Client> | undefined;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  readonly #databaseUrl: string;
  readonly #logger: Logger | undefined;
  readonly #reconnectMs: number;

  constructor(options: {
    databaseUrl: string;
    logger?: Logger | undefined;
    reconnectMs?: number | undefined;
  }) {
    this.#databaseUrl = options.databaseUrl;
    this.#logger = options.logger;
    this.#reconnectMs = options.reconnectMs ?? 1_000;
  }

  /** Calls `fn` on each notification of `channel` until the returned function is called. */
  async listen(channel: string, fn: () => void): Promise<() => Promise<void>> {
    let fns = this.#listeners.get(channel);
    const first = fns === undefined;
    if (fns === undefined) {
      fns = new Set();
      this.#listeners.set(channel, fns);
    }
    fns.add(fn);
    const client = await this.#connect();
    if (first) await client.query(`LISTEN ${quote(channel)}`);
    const listening = fns;
    return async () => {
      listening.delete(fn);
      if (listening.size > 0 || this.#listeners.get(channel) !== listening) return;
      this.#listeners.delete(channel);
      await this.#listener?.query(`UNLISTEN ${quote(channel)}`).catch(() => undefined);
    };
  }

  /** Ends the connection and stops reconnecting. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#reconnectTimer !== undefined) clearTimeout(this.#reconnectTimer);
    const client = this.#listener ?? (await this.#connecting?.catch(() => undefined));
    this.#listener = undefined;
    await client?.end().catch(() => undefined);
  }

  #tellAll(): void {
    for (const fns of this.#listeners.values()) for (const fn of fns) fn();
  }

  #connect(): Promise<pg.Client> {
    this.#connecting ??= this.#open();
    return this.#connecting;
  }

  async #open(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: this.#databaseUrl });
    const lost = (error?: Error) => this.#lost(client, error);
    client.on("error", lost);
    client.on("end", () => lost());
    client.on("notification", (message) => {
      for (const fn of this.#listeners.get(message.channel) ?? []) fn();
    });
    try {
      await client.connect();
      for (const channel of this.#listeners.keys()) await client.query(`LISTEN ${quote(channel)}`);
    } catch (error) {
      this.#connecting = undefined;
      client.end().catch(() => undefined);
      throw error;
    }
    this.#listener = client;
    return client;
  }

  /** The listening connection ended: drop it and, unless closed, connect again in a second. */
  #lost(client: pg.Client, error?: Error): void {
    if (this.#listener !== client) return;
    this.#listener = undefined;
    this.#connecting = undefined;
    client.end().catch(() => undefined);
    if (this.#closed) return;
    this.#logger?.warn({ err: error }, "PostgreSQL notification connection lost; reconnecting");
    this.#reconnectLater();
  }

  /** Connects again after the pause, and again after each refusal, until connected or closed. */
  #reconnectLater(): void {
    if (this.#closed) return;
    this.#reconnectTimer ??= setTimeout(() => {
      this.#reconnectTimer = undefined;
      // Whatever was sent while no one listened is found by the listeners' reads now.
      this.#connect().then(
        () => this.#tellAll(),
        (error: unknown) => {
          this.#logger?.warn({ err: error }, "PostgreSQL notification connection refused; trying again");
          this.#reconnectLater();
        },
      );
    }, this.#reconnectMs);
    this.#reconnectTimer.unref?.();
  }
}
