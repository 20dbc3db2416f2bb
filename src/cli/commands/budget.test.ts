import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../../agent/budget/createBudgetLedger.ts";
import { createFixedClock } from "../../protocol/clock.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import { createStore } from "../../store/createStore.ts";
import { agentDataDir } from "../openAgentStore.ts";
import { budgetCommand } from "./budget.ts";

const PROVIDER = "0x1111111111111111111111111111111111111111";
const clock = createFixedClock(Date.UTC(2026, 0, 1));

// Each command opens the on-disk PGlite database, as the real command does: slow on a busy machine.
describe("tollgate budget", { timeout: 180_000 }, () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "tollgate-budget-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function cli(...argv: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await budgetCommand([...argv, "--dir", dir], {
      env: {},
      out: { log: (line) => out.push(line), error: (line) => err.push(line) },
      clock,
    });
    return { code, out: out.join("\n"), err: err.join("\n") };
  }

  it("sets limits in USDC, keeps those not named, and removes one given as none", async () => {
    const first = await cli(
      "set",
      "researcher",
      "--total",
      "10",
      "--daily",
      "2",
      "--per-call",
      "0.05",
      "--provider",
      `${PROVIDER}=1`,
      "--max-subscription",
      "20",
    );
    expect(first.code).toBe(0);
    expect(first.out).toContain("total 10, daily 2, per call 0.05");
    const second = await cli("set", "researcher", "--daily", "none", "--total", "12.5");
    expect(second.out).toContain("total 12.5, daily unlimited, per call 0.05");
    expect(second.out).toContain(`provider ${PROVIDER} 1`);
    const store = await createStore({ dataDir: agentDataDir(dir) });
    try {
      expect(await createBudgetLedger({ store, clock }).getLimits("researcher")).toEqual({
        total: 12_500_000n,
        perCall: 50_000n,
        perProvider: { [PROVIDER]: 1_000_000n },
        maxSubscriptionCommitment: 20_000_000n,
      });
    } finally {
      await store.close();
    }
  });

  it("shows spent, reserved and remaining per limit and per provider", async () => {
    const store = await createStore({ dataDir: agentDataDir(dir) });
    try {
      const ledger = createBudgetLedger({ store, clock });
      await ledger.commit(
        await ledger.reserve("researcher", { amount: 30_000n, provider: PROVIDER, kind: "one-time" }),
      );
      await ledger.reserve("researcher", { amount: 20_000n, provider: PROVIDER, kind: "metered" });
    } finally {
      await store.close();
    }
    const shown = await cli("show", "researcher");
    expect(shown.code).toBe(0);
    const lines = shown.out.split("\n");
    expect(lines).toContainEqual(expect.stringMatching(/^total\s+12\.5\s+0\.03\s+0\.02\s+12\.45$/));
    expect(lines).toContainEqual(expect.stringMatching(/^per call\s+0\.05\s+0\.05$/));
    expect(lines).toContainEqual(
      expect.stringMatching(new RegExp(`^${PROVIDER}\\s+1\\s+0\\.03\\s+0\\.02\\s+0\\.95\\s+0\\.05$`)),
    );
    expect(lines).toContainEqual(expect.stringMatching(/^metered\s+0\s+0\.02$/));

    const json = await cli("show", "researcher", "--json");
    expect(JSON.parse(json.out)).toMatchObject({
      agent: "researcher",
      spent: { total: "30000" },
      reserved: { total: "20000" },
      remaining: { total: "12450000" },
    });
  });

  it("reports an agent without a budget and bad input", async () => {
    const missing = await cli("show", "nobody");
    expect(missing.code).toBe(1);
    expect(missing.err).toContain('agent "nobody" has no budget');
    expect((await cli("frobnicate", "x")).code).toBe(2);
    expect((await cli("show")).code).toBe(2);
    let error: unknown;
    try {
      await cli("set", "researcher", "--total", "1e6");
    } catch (e) {
      error = e;
    }
    expect(isTollgateError(error, "InvalidRequest")).toBe(true);
  });
});
