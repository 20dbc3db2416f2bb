/**
 * `tollgate run` and prepaid channels: a run whose calls make the policy open a channel closes it at
 * its end cooperatively with the seller's gate (the hold released, the seller's vouchers claimed, the
 * unspent deposit back at once), so `tollgate channel withdraw` finds nothing left — and the wallet moved
 * exactly what the ledger says.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { budgetCommand } from "../src/cli/commands/budget.ts";
import { channelCommand } from "../src/cli/commands/channel.ts";
import { type RunOutcome, runCommand } from "../src/cli/commands/run.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";

const FUNDS = 3_000_000n;
let stack: AgentStack;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "tollgate-run-channels-"));
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

async function runScript(key: Hex, agent: string, script: string, ...extra: string[]) {
  const output = capture();
  const code = await runCommand(
    [
      script,
      "--agent",
      agent,
      "--key",
      key,
      "--market",
      stack.market.url,
      "--facilitator",
      stack.tf.url,
      "--json",
      ...extra,
    ],
    { env: { TOLLGATE_DIR: dir }, out: output.out, fetch: globalThis.fetch, clock: systemClock, cwd: dir },
  );
  expect(output.errors).toEqual([]);
  expect(code).toBe(0);
  return JSON.parse(output.lines.join("\n")) as RunOutcome & { channels?: Record<string, string>[] };
}

async function channelCliOf(key: Hex, agent: string, ...args: string[]) {
  const output = capture();
  const code = await channelCommand(
    [...args, "--agent", agent, "--key", key, "--facilitator", stack.tf.url, "--json"],
    {
      env: { TOLLGATE_DIR: dir },
      out: output.out,
      fetch: globalThis.fetch,
      clock: systemClock,
      cwd: dir,
    },
  );
  expect(output.errors).toEqual([]);
  expect(code).toBe(0);
  return JSON.parse(output.lines.join("\n")) as unknown;
}

describe("tollgate run with a prepaid channel", { timeout: 240_000 }, () => {
  it("closes the channel it opened at its end cooperatively with the seller's gate: the unspent deposit is back at once and the wallet moved exactly the ledger's spend", async () => {
    const key = generatePrivateKey();
    const address = privateKeyToAccount(key).address;
    await stack.devnet.fund(address, { usd: FUNDS });
    const env = { TOLLGATE_DIR: dir };
    expect(
      await budgetCommand(["set", "burster", "--total", "1"], {
        env,
        out: capture().out,
        clock: systemClock,
      }),
    ).toBe(0);
    // Language checks in a row, forecast as a burst: the policy opens a channel for them.
    const discover = new URL("../src/agent/discoverTools.ts", import.meta.url).href;
    const counter = new URL("../src/agent/policy/createCallCounter.ts", import.meta.url).href;
    await writeFile(
      join(dir, "burst.ts"),
      [
        `import { discoverTools } from ${JSON.stringify(discover)};`,
        `import { createCallCounter } from ${JSON.stringify(counter)};`,
        "export async function main(context) {",
        "  const found = await discoverTools({",
        `    market: ${JSON.stringify(stack.market.url)}, search: { q: "detect-language" },`,
        "    agent: context.agent, payer: context.payer, budget: context.budget, channels: context.channels,",
        "    calls: createCallCounter({ clock: { now: () => Date.now() } }),",
        "    forecast: () => ({ calls: 10, horizonSeconds: 3600 }),",
        "  });",
        '  const tool = found.find((d) => d.tool.name.includes("detect-language")).tool;',
        "  const modes = [];",
        "  for (let i = 0; i < 10; i++) {",
        "    const text = 'The orchard harvest ' + i + ' was the best in a decade.';",
        "    const message = await tool.invoke({ type: 'tool_call', id: 'c' + i, name: tool.name, args: { text } });",
        "    modes.push(message.artifact.mode);",
        "  }",
        "  return modes.join(',');",
        "}",
      ].join("\n"),
    );
    await writeFile(join(dir, "idle.ts"), "export async function main() { return 'idle'; }\n");
    const run = (script: string) => runScript(key, "burster", script);
    const balance = () =>
      getTokenBalance(stack.devnet.publicClient, { token: stack.devnet.contracts.usd, owner: address });

    const first = await run("burst.ts");
    expect(first.answer).toBe(Array(10).fill("channel").join(","));
    expect(first.channels).toHaveLength(1);
    const closed = first.channels![0]!;
    const channelId = closed.channelId as Hex;
    const spentByChannel = BigInt(closed.spent!);
    expect(spentByChannel).toBeGreaterThan(0n);
    expect(BigInt(closed.returned!)).toBe(BigInt(closed.deposit!) - spentByChannel);
    // Nothing stays held for the channel: its unspent deposit is back in the budget at once.
    expect(first.budget.reserved.total).toBe("0");
    const chain = () =>
      readChannel(stack.devnet.publicClient, { channels: stack.devnet.contracts.channels, channelId });
    expect((await chain()).closeRequestedAt).toBeGreaterThan(0n);

    // The seller's gate forwards its vouchers on seeing the close; the facilitator claims them and
    // closes (when its transaction takes longer than the facilitator waits, the gate answered
    // "closing" and the close lands a little later: wait for the chain, not for the answer).
    const end = Date.now() + 60_000;
    const settled = async () => {
      const c = await chain();
      return c.closed && c.claimed >= spentByChannel;
    };
    while (!(await settled()) && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 250));
    }
    expect((await chain()).claimed).toBe(spentByChannel);
    const channelCli = (...args: string[]) => channelCliOf(key, "burster", ...args);
    // The seller's gate closed it cooperatively at the run's end: what it served is claimed and the rest
    // is back in the wallet now, not after the close delay — nothing is left to withdraw.
    expect(await chain()).toMatchObject({ closed: true, claimed: spentByChannel });
    expect(await channelCli("list")).toMatchObject([{ channelId, status: "closed" }]);
    expect(await channelCli("withdraw")).toEqual({ withdrawn: [], waiting: [] });

    const second = await run("idle.ts");
    expect(second.channels).toBeUndefined();
    expect((await chain()).closed).toBe(true);
    // The wallet moved exactly what the ledger recorded as spent (one-time calls and vouchers).
    expect(FUNDS - (await balance())).toBe(BigInt(second.budget.spent.total));
    expect(second.budget.reserved.total).toBe("0");
  });
  it("keeps the channel with --keep-channels, and `tollgate channel close --no-cooperative` leaves it to the close delay: the seller's vouchers are claimed, the rest is withdrawn after it", async () => {
    const key = generatePrivateKey();
    const address = privateKeyToAccount(key).address;
    await stack.devnet.fund(address, { usd: FUNDS });
    expect(
      await budgetCommand(["set", "keeper", "--total", "1"], {
        env: { TOLLGATE_DIR: dir },
        out: capture().out,
        clock: systemClock,
      }),
    ).toBe(0);
    const kept = await runScript(key, "keeper", "burst.ts", "--keep-channels");
    expect(kept.answer).toBe(Array(10).fill("channel").join(","));
    expect(kept.channels).toBeUndefined();
    const [open] = (await channelCliOf(key, "keeper", "list")) as { channelId: Hex; status: string }[];
    expect(open).toMatchObject({ status: "open" });
    const chain = () =>
      readChannel(stack.devnet.publicClient, {
        channels: stack.devnet.contracts.channels,
        channelId: open!.channelId,
      });

    const [closing] = (await channelCliOf(key, "keeper", "close", "--no-cooperative")) as Record<
      string,
      string
    >[];
    expect(closing).toMatchObject({ channelId: open!.channelId, status: "closing" });
    // The gate was not asked: the channel waits out its close delay; the facilitator claims what was served.
    const spent = BigInt(closing!.spent!);
    const end = Date.now() + 60_000;
    while ((await chain()).claimed < spent && Date.now() < end) await new Promise((r) => setTimeout(r, 250));
    expect(await chain()).toMatchObject({ closed: false, claimed: spent });
    expect(await channelCliOf(key, "keeper", "withdraw")).toEqual({
      withdrawn: [],
      waiting: [open!.channelId],
    });

    const { closeDelay } = await chain();
    await stack.devnet.advanceTime(Number(closeDelay) + 1);
    const after = (await channelCliOf(key, "keeper", "withdraw")) as { withdrawn: { refunded: string }[] };
    expect(after.withdrawn).toHaveLength(1);
    expect(await chain()).toMatchObject({ closed: true, claimed: spent });
    const balance = await getTokenBalance(stack.devnet.publicClient, {
      token: stack.devnet.contracts.usd,
      owner: address,
    });
    const report = (await runScript(key, "keeper", "idle.ts")).budget;
    expect(FUNDS - balance).toBe(BigInt(report.spent.total));
    expect(report.reserved.total).toBe("0");
  });
});
