/**
 * Subscriptions are state, not memory, across `tollgate run`s: the second run of an agent finds the
 * subscription the first took out in the agent's store and uses it, instead of subscribing to the
 * plan again (a second run once subscribed twice). And a run long enough for a
 * renewal to come due inside it cancels, before it renews, a subscription its calls no longer justify:
 * the watcher runs the policy's cancel check during the run, not only at its end.
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
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { createFixedClock, systemClock } from "../src/protocol/clock.ts";
import {
  getSubscriberInfo,
  getSubscriptionInfo,
} from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { createRenewalKeeper } from "../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
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

/** What the long run's script calls between its tool call and its end (set by the test). */
type DuringRun = { duringRun(receipt: PaidToolReceipt): Promise<void> };

describe("a long tollgate run", { timeout: 240_000 }, () => {
  it("cancels a subscription whose renewal comes due during the run when its calls no longer justify it", async () => {
    const key = generatePrivateKey();
    const address = privateKeyToAccount(key).address;
    await stack.devnet.fund(address, { usd: FUNDS });
    const env = { TOLLGATE_DIR: dir, TOLLGATE_RPC_URL: stack.devnet.rpcUrl };
    expect(
      await budgetCommand(["set", "long-runner", "--total", "1"], {
        env,
        out: capture().out,
        clock: systemClock,
      }),
    ).toBe(0);
    await writeFile(
      join(dir, "longRun.ts"),
      [
        "export async function main(context) {",
        '  const tool = context.tools.find((t) => t.name === "sentiment");',
        '  const message = await tool.invoke({ type: "tool_call", id: "c1", name: "sentiment", args: { text: "A fine, sunny and happy day." } });',
        "  await globalThis.tollgateLongRun.duringRun(message.artifact);",
        "  return JSON.stringify(message.artifact);",
        "}",
      ].join("\n"),
    );
    // The agent's clock moves with the chain: the run lasts (for the agent and the chain) a month.
    const clock = createFixedClock(Date.now());
    const facilitator = createFacilitatorClient({ url: stack.tf.url, fetch: globalThis.fetch });
    const ctx = stack.tf.facilitator.context;
    const renewals = createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx) });
    const advance = async (seconds: number) => {
      await stack.devnet.advanceTime(seconds);
      clock.advance(seconds * 1000);
    };
    let cancelledDuringRun = false;
    (globalThis as unknown as { tollgateLongRun: DuringRun }).tollgateLongRun = {
      async duringRun(receipt) {
        const id = BigInt(receipt.subscriptionId!);
        const info = await getSubscriptionInfo(facilitator, id);
        // One call, then nothing for most of the month: into the window before the renewal.
        await advance(Number(info.nextChargeAt) - info.chainTime - 6 * 3600);
        const deadline = Date.now() + 15_000;
        while (Date.now() < deadline) {
          if ((await getSubscriptionInfo(facilitator, id)).status === "Cancelled") {
            cancelledDuringRun = true;
            break;
          }
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        // The renewal comes due while the run goes on, and the facilitator's keeper runs.
        await advance(6 * 3600 + 60);
        await renewals.runOnce();
        await renewals.runOnce();
      },
    };
    const output = capture();
    const code = await runCommand(
      [
        "longRun.ts",
        "--agent",
        "long-runner",
        "--key",
        key,
        "--market",
        stack.market.url,
        "--facilitator",
        stack.tf.url,
      ],
      { env, out: output.out, fetch: globalThis.fetch, clock, cwd: dir, watchIntervalMs: 200 },
    );
    expect(output.errors).toEqual([]);
    expect(code).toBe(0);
    expect(cancelledDuringRun).toBe(true);
    const text = output.lines.join("\n");
    expect(text).toMatch(
      /calls expected per 30 days at the running rate, too few to renew it for 0\.05 USDC: cancel before it renews/,
    );
    const held = (await getSubscriberInfo(facilitator, address)).subscriptions;
    expect(held.map((s) => s.status)).toEqual(["Cancelled"]);
    // The first period left the wallet; the renewal that came due during the run did not.
    const balance = await getTokenBalance(stack.devnet.publicClient, {
      token: stack.devnet.contracts.usd,
      owner: address,
    });
    expect(FUNDS - balance).toBe(50_000n);
    const show = capture();
    expect(
      await budgetCommand(["show", "long-runner", "--json"], { env, out: show.out, clock: systemClock }),
    ).toBe(0);
    const report = JSON.parse(show.lines.join("\n"));
    expect(report.spent.total).toBe("50000");
    expect(report.subscriptions.held).toBe("0");
  });
});
