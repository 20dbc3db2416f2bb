/**
 * The chain watch on a devnet: a log of a watched address reaches its listener over anvil's WebSocket,
 * and releasing the watch closes the socket without reporting a failure (the facilitator logged two
 * warnings at every stop).
 */
import { Writable } from "node:stream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../chain/startDevnet.ts";
import { acquireChainWatch } from "./chainWatch.ts";

let devnet: Devnet;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 2 });
});

afterAll(async () => {
  await devnet?.stop();
});

describe("acquireChainWatch", () => {
  it("tells a listener of its address's logs over WebSocket, and closes quietly when released", async () => {
    const lines: { level: number; msg: string }[] = [];
    const logger = pino(
      { level: "debug" },
      new Writable({
        write(chunk: Buffer, _encoding, done) {
          for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line));
          done();
        },
      }),
    );
    const { watch, release } = acquireChainWatch(devnet.publicClient, logger);
    expect(watch.mode()).toBe("websocket");
    let told = 0;
    watch.watch(devnet.contracts.usd, () => {
      told++;
    });
    const stopOther = watch.watch(devnet.contracts.batchSettler, () => {});
    // The subscription tells once when it begins; a transfer's log tells again.
    await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(0);
    const before = told;
    await devnet.fund(devnet.accounts[1]!.address, { usd: 1n });
    await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(before);
    // As a stopping facilitator does: one follower stops (the watch subscribes again for the rest),
    // and the watch is released while that subscription is on its way, its listener still on.
    stopOther();
    release();
    await new Promise((r) => setTimeout(r, 300));
    expect(lines.filter((l) => l.level >= 40).map((l) => l.msg)).toEqual([]);
  });
});
