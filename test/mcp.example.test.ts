/**
 * Runs the MCP example end to end (examples/mcpBuyer.ts with examples/mcpSeller.ts): a seller over
 * Streamable HTTP in-process and the same seller started by the agent over stdio, bought under a budget.
 */
import { describe, expect, it } from "vitest";
import { main as mcpBuyer } from "../examples/mcpBuyer.ts";

// The whole demo runs (devnet, facilitator, agents): ~25 s on a quiet machine, more under CI load.
describe("examples/mcpBuyer", { timeout: 120_000 }, () => {
  it("buys over Streamable HTTP and stdio, the free tool costs nothing, the call past the budget is refused, and ledger and chain agree", async () => {
    const result = await mcpBuyer({ print: () => undefined });
    expect(result.httpTools).toEqual(["count_words", "hello"]);
    expect(result.stdioTools).toEqual(["count_words", "hello"]);
    expect(result.calls.map((c) => [c.via, c.tool, c.receipt.mode, c.receipt.amount])).toEqual([
      ["http", "hello", "free", "0"],
      ["http", "count_words", "one-time", "0.002"],
      ["stdio", "count_words", "one-time", "0.002"],
      ["stdio", "count_words", "free", "0"],
    ]);
    expect(JSON.parse(result.calls[1]!.content)).toEqual({ words: 8 });
    expect(JSON.parse(result.calls[2]!.content)).toEqual({ words: 8 });
    expect(result.calls[3]!.content).toMatch(/^ERROR BudgetExceeded/);
    expect(result.ledgerSpent).toBe(4_000n);
    expect(result.buyerPaid).toBe(4_000n);
    expect(result.httpSellerReceived).toBe(2_000n);
    expect(result.stdioSellerReceived).toBe(2_000n);
  }, 120_000);
});
