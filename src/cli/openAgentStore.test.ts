import { spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../agent/budget/createBudgetLedger.ts";
import { createFixedClock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { agentDataDir, openAgentStore } from "./openAgentStore.ts";

const clock = createFixedClock(Date.UTC(2026, 0, 1));
/** Waiting costs no time in these tests: each wait only counts an attempt. */
const noWait = async () => undefined;

// Each test opens the on-disk PGlite database, as the commands do: slow on a busy machine.
describe("openAgentStore", { timeout: 180_000 }, () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "tollgate-agent-store-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("refuses a second open of a directory that is still open, naming the holder, instead of sharing it", async () => {
    const first = await openAgentStore({ databaseUrl: undefined, dir, sleep: noWait });
    try {
      const second = openAgentStore({ databaseUrl: undefined, dir, waitMs: 500, sleep: noWait });
      await expect(second).rejects.toThrow(TollgateError);
      await expect(second).rejects.toMatchObject({
        code: "InvalidRequest",
        details: { reason: "store_in_use", owner: process.pid, dataDir: agentDataDir(dir) },
      });
    } finally {
      await first.close();
    }
    expect(existsSync(`${agentDataDir(dir)}.lock`)).toBe(false);
  });

  it("waits for the holder to close, then opens and sees what the holder committed", async () => {
    const first = await openAgentStore({ databaseUrl: undefined, dir });
    await createBudgetLedger({ store: first, clock }).setLimits("researcher", { total: 5_000_000n });
    let waits = 0;
    const second = await openAgentStore({
      databaseUrl: undefined,
      dir,
      sleep: async () => {
        waits += 1;
        if (waits === 3) await first.close();
      },
    });
    try {
      expect(waits).toBe(3);
      expect(await createBudgetLedger({ store: second, clock }).getLimits("researcher")).toEqual({
        total: 5_000_000n,
      });
    } finally {
      await second.close();
    }
  });

  it("takes over a lock left by a process that is gone", async () => {
    const gone = spawnSync(process.execPath, ["-e", ""]).pid;
    writeFileSync(`${agentDataDir(dir)}.lock`, `${gone}\n`);
    const store = await openAgentStore({ databaseUrl: undefined, dir, waitMs: 0, sleep: noWait });
    await store.close();
    expect(existsSync(`${agentDataDir(dir)}.lock`)).toBe(false);
  });
});
