/**
 * `tollgate run` as its own process, as the README's quick tour runs it on `tollgate devnet up`: the
 * agent pays from the agent's dev account (4) unless told otherwise, every `--text` is worked on,
 * and a task the budget refused says so and exits 1 instead of reporting a purchase.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AgentStack, startAgentStack } from "../../../test/support/agentStack.ts";
import { runCli } from "../../../test/support/runCli.ts";
import { getTokenBalance } from "../../chain/actions/usd/getTokenBalance.ts";
import { type DevnetFile, describeDevnet } from "../../chain/devnetFile.ts";
import { systemClock } from "../../protocol/clock.ts";
import { budgetCommand } from "./budget.ts";

const ENGLISH =
  "The orchard harvest was the best in a decade. Farmers praised the warm spring and gentle rain.";
const FRENCH =
  "La récolte du verger a été la meilleure depuis dix ans. Les agriculteurs ont salué le printemps.";

let stack: AgentStack;
let dir: string;

beforeAll(async () => {
  stack = await startAgentStack();
  dir = mkdtempSync(join(tmpdir(), "tollgate-run-cli-"));
  // What `tollgate devnet up` writes, for the stack's devnet.
  const { devnet } = stack;
  const file: DevnetFile = describeDevnet(devnet);
  writeFileSync(join(dir, "devnet.json"), JSON.stringify(file), { mode: 0o600 });
}, 180_000);

afterAll(async () => {
  await stack?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

const balanceOf = (owner: Address) =>
  getTokenBalance(stack.devnet.publicClient, { token: stack.devnet.contracts.usd, owner });

async function setBudget(agent: string, flags: string[]) {
  const out = { log: () => undefined, error: () => undefined };
  expect(
    await budgetCommand(["set", agent, ...flags], { env: { TOLLGATE_DIR: dir }, out, clock: systemClock }),
  ).toBe(0);
}

function run(args: string[]) {
  return runCli(["run", ...args, "--market", stack.market.url, "--facilitator", stack.tf.url], {
    env: { TOLLGATE_DIR: dir },
    timeoutMs: 200_000,
  });
}

// Each run starts a Node process that loads LangChain and pays on chain: slow on a loaded machine.
describe("tollgate run as a process", { timeout: 240_000 }, () => {
  it("pays from the agent's dev account 4 by default and works on every --text it is given", async () => {
    await setBudget("tourist", ["--total", "1"]);
    const agent = stack.devnet.accounts[4]!.address;
    const before = await balanceOf(agent);
    const result = await run([
      "Detect the language of each text",
      "--agent",
      "tourist",
      "--text",
      ENGLISH,
      "--text",
      FRENCH,
    ]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`agent tourist (${agent}, devnet account 4)`);
    // Both texts were worked on: one purchase each, not only the last one given.
    expect(result.stdout.match(/bought detect-language → one-time 0\.005 USDC/g)).toHaveLength(2);
    expect(result.stdout).toMatch(/text-1.*\ben\b/s);
    expect(result.stdout).toMatch(/text-2.*\bfr\b/s);
    expect(before - (await balanceOf(agent))).toBe(10_000n);
  });

  it("says a spend the budget refused is not a purchase, pays nothing and exits 1", async () => {
    await setBudget("frugal", ["--total", "0.001"]);
    const agent = stack.devnet.accounts[4]!.address;
    const before = await balanceOf(agent);
    const result = await run(["Detect the language of the text", "--agent", "frugal", "--text", ENGLISH]);
    expect(result.code).toBe(1);
    expect(result.stdout).toContain("detect-language → refused by the budget: nothing paid (BudgetExceeded)");
    expect(result.stdout).not.toContain("bought detect-language");
    expect(result.stderr).toMatch(
      /task not done:\n {2}detect-language: refused by the budget: BudgetExceeded/,
    );
    // The spend report's row shows the refused call as failed, not as a row of zeros.
    expect(result.stdout).toMatch(/tool\s+modes\s+calls\s+failed\s+spent/);
    expect(result.stdout).toMatch(/detect-language\s+\S+\s+0\s+1\s+0\s/);
    expect(await balanceOf(agent)).toBe(before);

    // A task no tool matches cannot be done either: exit 1, saying so, nothing paid.
    const unmatched = await run(["Juggle flaming torches", "--agent", "frugal", "--text", ENGLISH]);
    expect(unmatched.code).toBe(1);
    expect(unmatched.stderr).toContain("task not done:\n  (none): no tool in the market matches this task");
    expect(await balanceOf(agent)).toBe(before);
  });
});
