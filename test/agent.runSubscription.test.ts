/**
 * Subscriptions are state, not memory, across `tollgate run`s: the second run of an agent finds the
 * subscription the first took out in the agent's store and uses it, instead of subscribing to the
 * plan again (issue 12; the review saw a second run subscribe twice).
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { budgetCommand } from "../src/cli/commands/budget.ts";
import { runCommand } from "../src/cli/commands/run.ts";
import { createFacilitatorClient } from "../src/client/facilitatorClient.ts";
import { getSubscriberInfo } from "../src/client/facilitatorSubscriptions.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";

const FUNDS = 3_000_000n;
let stack: AgentStack;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "tollgate-run-sub-"));
  stack = await startAgentStack();
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

function capture() {
  const lines: string[] = [];
  const errors: string[] = [];
  return { lines, errors, out: { log: (l: string) => lines.push(l), error: (l: string) => errors.push(l) } };
}

describe("a second tollgate run", { timeout: 240_000 }, () => {
  it("reuses the subscription the first run took out", async () => {
    const key = generatePrivateKey();
    const address = privateKeyToAccount(key).address;
    await stack.devnet.fund(address, { usd: FUNDS });
    // With a node to read from, each run also records what the subscription pulled since the last.
    const env = { TOLLGATE_DIR: dir, TOLLGATE_RPC_URL: stack.devnet.rpcUrl };
    expect(
      await budgetCommand(["set", "subscriber", "--total", "1"], {
        env,
        out: capture().out,
        clock: systemClock,
      }),
    ).toBe(0);
    await writeFile(
      join(dir, "scoreOnce.ts"),
      [
        "export async function main(context) {",
        '  const tool = context.tools.find((t) => t.name === "sentiment");',
        '  const message = await tool.invoke({ type: "tool_call", id: "c1", name: "sentiment", args: { text: "A fine, sunny and happy day." } });',
        "  return JSON.stringify(message.artifact);",
        "}",
      ].join("\n"),
    );
    const run = async () => {
      const output = capture();
      const code = await runCommand(
        [
          "scoreOnce.ts",
          "--agent",
          "subscriber",
          "--key",
          key,
          "--market",
          stack.market.url,
          "--facilitator",
          stack.tf.url,
        ],
        { env, out: output.out, fetch: globalThis.fetch, clock: systemClock, cwd: dir },
      );
      expect(output.errors).toEqual([]);
      expect(code).toBe(0);
      const text = output.lines.join("\n");
      const answer = text.slice(text.indexOf("Answer (script scoreOnce.ts):\n")).split("\n")[1]!;
      return JSON.parse(answer) as PaidToolReceipt;
    };
    const first = await run();
    expect(first).toMatchObject({ mode: "subscription", amount: "0.05" });
    const second = await run();
    expect(second.error).toBeUndefined();
    expect(second.subscriptionId).toBe(first.subscriptionId);
    expect(second.amount).toBe("0");
    const facilitator = createFacilitatorClient({ url: stack.tf.url, fetch: globalThis.fetch });
    const held = (await getSubscriberInfo(facilitator, address)).subscriptions;
    expect(held).toHaveLength(1);
    // The first period and nothing else left the wallet.
    const balance = await getTokenBalance(stack.devnet.publicClient, {
      token: stack.devnet.contracts.usd,
      owner: address,
    });
    expect(FUNDS - balance).toBe(50_000n);
    const show = capture();
    expect(
      await budgetCommand(["show", "subscriber", "--json"], { env, out: show.out, clock: systemClock }),
    ).toBe(0);
    expect(JSON.parse(show.lines.join("\n")).spent.total).toBe("50000");
  });
});
