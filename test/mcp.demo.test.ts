/**
 * The demo buys one capability over MCP (agents/demo.ts): the research agent calls the linguist's
 * `detect-language` through the MCP endpoint the market lists, paid from the same budget, and the
 * report says so. One document keeps the run short; test/demo.test.ts runs the whole demo.
 */
import { describe, expect, it } from "vitest";
import { runDemo } from "../agents/demo.ts";

// The whole demo runs (devnet, facilitator, agents): ~25 s on a quiet machine, more under CI load.
describe("npm run demo, over MCP", { timeout: 120_000 }, () => {
  it("buys detect-language over the linguist's MCP endpoint and shows the purchase in the report", async () => {
    const lines: string[] = [];
    const result = await runDemo({ print: (line) => lines.push(line), env: {}, maxDocuments: 1 });
    expect(result.overMcp).toHaveLength(1);
    const [bought] = result.overMcp;
    expect(bought!.tool).toBe("detect-language");
    expect(bought!.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp#detect-language$/);
    expect(bought!.calls).toBeGreaterThan(0);
    expect(bought!.amount).toBeGreaterThan(0n);
    const tool = result.report.tools.find((t) => t.tool === "detect-language");
    expect(tool?.failed).toBe(0);
    expect(result.agentPaidOnChain).toBe(result.ledgerSpent);
    const text = lines.join("\n");
    expect(text).toContain("over MCP: detect-language at http://127.0.0.1:");
    expect(text).toMatch(/bought detect-language from linguist over MCP → one-time/);
  }, 180_000);
});
