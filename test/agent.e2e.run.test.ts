/**
 * `tollgate run` against a running set-up (devnet, facilitator, market and the marketplace's sellers,
 * in this process): the budget is the one `tollgate budget set` stored in the Tollgate directory, the
 * tools come from the market, and the printed spend report matches the ledger and the chain.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import type { Devnet } from "../src/chain/startDevnet.ts";
import { budgetCommand } from "../src/cli/commands/budget.ts";
import { runCommand } from "../src/cli/commands/run.ts";
import type { RunningServer } from "../src/facilitator/createFacilitator.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";
import type { TestFacilitator } from "./support/facilitatorHarness.ts";

const TEXT =
  "The orchard harvest was the best in a decade. Farmers praised the warm spring and gentle rain. " +
  "Cider makers expect an excellent season. Markets will open early this year.";
const FUNDS = 3_000_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let market: RunningServer;
let stack: AgentStack | undefined;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "tollgate-run-"));
  stack = await startAgentStack();
  ({ devnet, tf, market } = stack);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

function capture() {
  const lines: string[] = [];
  const errors: string[] = [];
  return { lines, errors, out: { log: (l: string) => lines.push(l), error: (l: string) => errors.push(l) } };
}

/** A funded key, and a budget for `agent` set the way a user sets it: `tollgate budget set`. */
async function agentWithBudget(agent: string, flags: string[]) {
  const key = generatePrivateKey();
  const address = privateKeyToAccount(key).address;
  await devnet.fund(address, { usd: FUNDS });
  const { out } = capture();
  const env = { TOLLGATE_DIR: dir };
  expect(await budgetCommand(["set", agent, ...flags], { env, out, clock: systemClock })).toBe(0);
  return { key, address };
}

async function budgetShow(agent: string) {
  const { lines, out } = capture();
  expect(
    await budgetCommand(["show", agent, "--json"], { env: { TOLLGATE_DIR: dir }, out, clock: systemClock }),
  ).toBe(0);
  return JSON.parse(lines.join("\n")) as { spent: { total: string }; reserved: { total: string } };
}

/**
 * The child's environment: the Tollgate directory the budget was set in, and no DATABASE_URL, since
 * `agentWithBudget` stored the budget in that directory's PGlite rather than in the suite's PostgreSQL.
 */
function childEnv(): NodeJS.ProcessEnv {
  const { DATABASE_URL: _unused, ...rest } = process.env;
  return { ...rest, TOLLGATE_DIR: dir };
}

const deps = (out: ReturnType<typeof capture>["out"]) => ({
  env: { TOLLGATE_DIR: dir },
  out,
  fetch: globalThis.fetch,
  clock: systemClock,
  cwd: dir,
});

// A run buys from live sellers and settles on chain: slow on a loaded machine. A test abandoned at its
// timeout would go on running with the agent store open, so the limit is generous.
describe("tollgate run", { timeout: 240_000 }, () => {
  it("runs a task as the named agent on its stored budget and prints a spend report that matches the chain", async () => {
    const { key, address } = await agentWithBudget("runner", ["--total", "1", "--per-call", "0.5"]);
    const output = capture();
    const code = await runCommand(
      [
        "Summarize the text and detect its language",
        "--agent",
        "runner",
        "--text",
        TEXT,
        "--key",
        key,
        "--market",
        market.url,
        "--facilitator",
        tf.url,
        "--json",
      ],
      deps(output.out),
    );
    expect(output.errors).toEqual([]);
    expect(code).toBe(0);
    const outcome = JSON.parse(output.lines.join("\n")) as {
      agent: string;
      planner: string;
      answer: string;
      report: { total: string; tools: { tool: string; calls: number; amount: string }[] };
      budget: { spent: { total: string } };
    };
    expect(outcome.agent).toBe("runner");
    expect(outcome.planner).toBe("rules");
    const bought = outcome.report.tools.map((t) => t.tool).sort();
    expect(bought).toEqual(["detect-language", "summarize"]);
    expect(outcome.answer).toMatch(/en/);

    const paid = FUNDS - (await balanceOf(address));
    expect(paid).toBeGreaterThan(0n);
    expect(BigInt(outcome.report.total)).toBe(paid);
    expect(BigInt(outcome.budget.spent.total)).toBe(paid);
    // The ledger `tollgate budget show` reads is the one the run spent from.
    expect(BigInt((await budgetShow("runner")).spent.total)).toBe(paid);
  });

  it("runs a script's exported main with the agent's paid tools and prints the spend report", async () => {
    const { key, address } = await agentWithBudget("scripted", ["--total", "0.5"]);
    const script = join(dir, "buyBrief.ts");
    await writeFile(
      script,
      [
        "export async function main(context) {",
        '  const brief = context.tools.find((t) => t.name === "brief");',
        "  const result = await brief.invoke({ text: process.env.BRIEF_TEXT });",
        '  context.print("bought a brief");',
        "  return 'brief for ' + context.agent + ': ' + JSON.parse(result).mood;",
        "}",
      ].join("\n"),
    );
    process.env.BRIEF_TEXT = TEXT;
    const output = capture();
    const code = await runCommand(
      ["buyBrief.ts", "--agent", "scripted", "--key", key, "--market", market.url, "--facilitator", tf.url],
      deps(output.out),
    );
    delete process.env.BRIEF_TEXT;
    expect(output.errors).toEqual([]);
    expect(code).toBe(0);
    const text = output.lines.join("\n");
    expect(text).toContain("bought a brief");
    expect(text).toContain("Answer (script buyBrief.ts):\nbrief for scripted: positive");
    expect(text).toContain("Spend report");
    expect(text).toMatch(/brief .*0\.08/);
    expect(text).toContain("budget of scripted: spent 0.08 USDC, 0.42 USDC left");
    expect(FUNDS - (await balanceOf(address))).toBe(80_000n);
    expect(BigInt((await budgetShow("scripted")).spent.total)).toBe(80_000n);
  });

  it("refuses to run an agent that has no budget", async () => {
    const key = generatePrivateKey();
    const output = capture();
    const code = await runCommand(
      [
        "Summarize it",
        "--agent",
        "nobody",
        "--text",
        TEXT,
        "--key",
        key,
        "--market",
        market.url,
        "--facilitator",
        tf.url,
      ],
      deps(output.out),
    );
    expect(code).toBe(1);
    expect(output.errors.join("\n")).toMatch(/agent "nobody" has no budget/);
  });

  it("works as the `tollgate` command in its own process", async () => {
    const { key, address } = await agentWithBudget("spawned", ["--total", "0.1"]);
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        "--import",
        "tsx",
        join(import.meta.dirname, "../src/cli/main.ts"),
        "run",
        "Detect the language of the text",
        "--agent",
        "spawned",
        "--text",
        TEXT,
        "--key",
        key,
        "--market",
        market.url,
        "--facilitator",
        tf.url,
      ],
      { cwd: join(import.meta.dirname, ".."), env: childEnv() },
    );
    expect(stdout).toContain("bought detect-language → one-time 0.005 USDC");
    expect(stdout).toContain("Spend report");
    expect(stdout).toContain("budget of spawned: spent 0.005 USDC, 0.095 USDC left");
    expect(FUNDS - (await balanceOf(address))).toBe(5_000n);
  });
});
