import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { pauseToken } from "../chain/actions/usdc/pauseToken.ts";
import { unpauseToken } from "../chain/actions/usdc/unpauseToken.ts";
import { type Devnet, startDevnet } from "../chain/startDevnet.ts";
import type { Clock } from "../protocol/clock.ts";
import { TokenPausedEventDataSchema, TokenUnpausedEventDataSchema } from "../protocol/webhook.ts";
import { createTestStore } from "../store/createTestStore.ts";
import type { Queryable, Store } from "../store/store.ts";
import { createTokenPauseWatch, type TokenPauseWatchOptions } from "./tokenPauseWatch.ts";

describe("createTokenPauseWatch", () => {
  let devnet: Devnet;
  let store: Store;
  let now = Date.UTC(2026, 11, 5, 1, 0, 0);
  const clock: Clock = { now: () => now };
  const gauge = new Map<string, boolean>();
  /** paused() calls on the contract that has none. */
  let settlerReads = 0;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 1 });
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  }, 60_000);
  afterAll(async () => {
    await store?.close();
    await devnet?.stop();
  });

  /** A watch as one facilitator instance makes it; `intervalMs` long so only `check` reads the chain. */
  function watch(overrides: Partial<TokenPauseWatchOptions> = {}) {
    return createTokenPauseWatch({
      store,
      client: {
        readContract: ((args: { address: string }) => {
          if (args.address.toLowerCase() === devnet.contracts.batchSettler.toLowerCase()) settlerReads++;
          return devnet.publicClient.readContract(args as never);
        }) as Devnet["publicClient"]["readContract"],
      },
      chainId: devnet.chain.id,
      network: devnet.network,
      tokens: [
        { address: devnet.contracts.usd, symbol: "USDC" },
        // A contract without paused(): read once, never paused.
        { address: devnet.contracts.batchSettler },
      ],
      clock,
      logger: pino({ level: "silent" }),
      metrics: { onTokenPaused: (token, paused) => gauge.set(token, paused) },
      async recordEvent(db: Queryable, type: string, data: Record<string, unknown>) {
        await db.query("INSERT INTO events (type, data) VALUES ($1, $2)", [type, data]);
      },
      intervalMs: 3_600_000,
      ...overrides,
    });
  }
  const events = (type: string) =>
    store.query<{ data: Record<string, unknown> }>("SELECT data FROM events WHERE type = $1 ORDER BY id", [
      type,
    ]);
  const setPaused = async (paused: boolean) => {
    const client = devnet.walletClient(devnet.deployer);
    const token = devnet.contracts.usd;
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await (paused ? pauseToken(client, { token }) : unpauseToken(client, { token })),
    });
  };

  it("records a pause once across instances sharing a store, keeps its start over a restart, and calls back on the unpause", async () => {
    const token = devnet.contracts.usd;
    const a = watch();
    const b = watch();
    await a.start();
    await b.start();
    expect(a.isPaused(token)).toBe(false);
    expect(gauge.get(token.toLowerCase())).toBe(false);

    await setPaused(true);
    const pausedAt = now;
    await Promise.all([a.check(), b.check()]);
    expect(a.isPaused(token)).toBe(true);
    expect(b.isPaused(token)).toBe(true);
    expect(a.isPaused(devnet.contracts.batchSettler)).toBe(false);
    expect(gauge.get(token.toLowerCase())).toBe(true);
    const paused = await events("token.paused");
    expect(paused).toHaveLength(1);
    expect(TokenPausedEventDataSchema.parse(paused[0]!.data)).toEqual({
      network: devnet.network,
      token,
      since: pausedAt / 1000,
    });

    // Another instance started later (or this one restarted) holds at once, with the pause's start.
    now += 60_000;
    await b.stop();
    const c = watch();
    await c.start();
    expect(c.paused()).toEqual([{ token, symbol: "USDC", since: new Date(pausedAt) }]);
    await c.check();
    expect(await events("token.paused")).toHaveLength(1);

    const resumed: string[] = [];
    a.onResume((t) => resumed.push(t));
    c.onResume((t) => resumed.push(t));
    await setPaused(false);
    now += 60_000;
    await Promise.all([a.check(), c.check()]);
    expect(a.isPaused(token)).toBe(false);
    expect(c.paused()).toEqual([]);
    expect(resumed).toEqual([token, token]);
    const unpaused = await events("token.unpaused");
    expect(unpaused).toHaveLength(1);
    expect(TokenUnpausedEventDataSchema.parse(unpaused[0]!.data)).toEqual({
      network: devnet.network,
      token,
      pausedSince: pausedAt / 1000,
      unpausedAt: now / 1000,
    });
    expect(gauge.get(token.toLowerCase())).toBe(false);
    await a.stop();
    await c.stop();
  });

  it("reads paused() of a contract without it once, and never again", async () => {
    const w = watch();
    settlerReads = 0;
    await w.start();
    await w.check();
    await w.check();
    expect(settlerReads).toBe(1);
    expect(w.isPaused(devnet.contracts.batchSettler)).toBe(false);
    await w.stop();
  });

  it("reads paused() at once when a refusal names the pause, without waiting for its interval", async () => {
    const token = devnet.contracts.usd;
    const w = watch();
    await w.start();
    await setPaused(true);
    // Its next round is an hour away: only `suspect` can make it read now.
    w.suspect(token);
    await vi.waitFor(
      () => expect(w.paused().map((p) => p.token.toLowerCase())).toEqual([token.toLowerCase()]),
      { timeout: 5_000 },
    );
    expect(w.isPaused(token)).toBe(true);
    await setPaused(false);
    await w.check();
    expect(w.isPaused(token)).toBe(false);
    await w.stop();
  });

  it("holds a token a refusal named until paused() is read, then lets it go with a resume when it is not paused", async () => {
    const token = devnet.contracts.usd;
    const w = watch();
    await w.start();
    await w.check();
    const resumed: string[] = [];
    w.onResume((t) => resumed.push(t.toLowerCase()));
    // The refusal is taken at its word until the chain is read: nothing requeued by it is sent meanwhile.
    w.suspect(token);
    expect(w.heldTokens()).toEqual([token.toLowerCase()]);
    expect(w.isPaused(token)).toBe(true);
    expect(w.paused()).toEqual([]);
    await w.check();
    expect(w.heldTokens()).toEqual([]);
    expect(w.isPaused(token)).toBe(false);
    expect(resumed).toEqual([token.toLowerCase()]);
    await w.stop();
  });
});
