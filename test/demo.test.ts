/**
 * The main job, as `npm run demo` runs it: every kind of purchase happens, and the figures the report
 * prints are the ones the chain and the ledger hold.
 */
import { parseUnits } from "viem";
import { describe, expect, it } from "vitest";
import { runDemo } from "../agents/demo.ts";

// The whole demo runs (devnet, facilitator, agents): ~25 s on a quiet machine, more under CI load.
describe("npm run demo", { timeout: 120_000 }, () => {
  it("buys one-time, subscription, metered, channel and resold results, renews, and its figures match the chain", async () => {
    const lines: string[] = [];
    const result = await runDemo({ print: (line) => lines.push(line), env: {} });

    const modes = new Map(result.report.tools.map((t) => [t.tool, t.modes]));
    // A burst bought through one prepaid channel: opened, 24 calls by voucher, claimed, closed, the rest returned.
    expect(modes.get("detect-language")?.channel).toBe(24);
    expect(result.channel).toMatchObject({ tool: "detect-language", calls: 24, channels: 1 });
    expect(result.channel.spent).toBe(24n * 4_000n);
    expect(result.channel.claimed).toBe(result.channel.spent);
    expect(result.channel.returned).toBe(result.channel.deposit - result.channel.spent);
    expect(modes.get("detect-language")?.["one-time"]).toBeGreaterThan(0);
    expect(modes.get("summarize")?.subscription).toBeGreaterThan(0);
    expect(modes.get("sentiment")?.metered).toBeGreaterThan(0);
    expect(modes.get("brief")?.["one-time"]).toBeGreaterThan(0);
    expect(result.report.tools.every((t) => t.failed === 0)).toBe(true);

    // The agent's on-chain payments equal what its ledger and its spend report say it spent.
    expect(result.agentPaidOnChain).toBe(result.ledgerSpent);
    expect(result.report.total).toBe(result.ledgerSpent);

    // Agent-to-agent: the reseller bought from both of its suppliers while selling briefs.
    const resold = new Set(result.resellerSpend.filter((e) => e.ok).map((e) => e.tool));
    expect(resold).toEqual(new Set(["summarize", "sentiment"]));

    expect(result.renewals).toBeGreaterThan(0);
    // The researcher's renewals, as the providers' webhooks report them, are what left its wallet.
    expect(result.researcherRenewals).toBeGreaterThan(0n);
    expect(result.researcherRenewedOnChain).toBe(result.researcherRenewals);
    const types = new Set(result.webhookEvents.map((e) => e.type));
    for (const type of [
      "payment.settled",
      "subscription.created",
      "subscription.renewed",
      "allowance.deducted",
    ]) {
      expect(types).toContain(type);
    }
    expect(result.planner).toBe("rules");
    expect(lines.join("\n")).toContain("Spend report");

    const printed = lines.flatMap((line) => line.split("\n"));
    // The budget's lines add up: spent + reserved + left is the budget, each read as printed.
    const amount = (label: string) => {
      const found = printed.map((l) => new RegExp(`^\\s+${label}\\s+([\\d.]+) USDC`).exec(l)).find((m) => m);
      expect(found, label).toBeDefined();
      return parseUnits(found![1]!, 6);
    };
    const budget = printed
      .map((l) => /budget of "researcher": ([\d.]+) USDC = spent \+ reserved \+ left/.exec(l))
      .find((m) => m);
    expect(budget).toBeDefined();
    expect(amount("spent") + amount("reserved") + amount("left")).toBe(parseUnits(budget![1]!, 6));
    expect(amount("spent")).toBe(result.ledgerSpent);

    // No line is cut: every line that looks like JSON parses.
    for (const line of printed.map((l) => l.trim()).filter((l) => l.startsWith("{") || l.startsWith("["))) {
      expect(() => JSON.parse(line), line).not.toThrow();
    }
    expect(printed).toContainEqual(
      expect.stringMatching(/notarized: hash 0x[0-9a-f]{64} in transaction 0x[0-9a-f]{64},/),
    );

    // Calls run at once, yet each purchase is printed under the call that made it.
    let heading: string | undefined;
    for (const line of printed) {
      const call = /^ {2}→ (\S+)/.exec(line);
      if (call) heading = call[1];
      const bought = /^ {4}bought (\S+) from/.exec(line);
      if (bought && heading !== undefined) expect(bought[1], line).toBe(heading);
      if (line.startsWith("▶")) heading = undefined;
    }
  }, 300_000);
});
