/**
 * Buying over MCP (docs/mcp.md): an agent's paid tools over MCP clients (Streamable HTTP on loopback)
 * behave as over HTTP — the payment-required result is weighed by the policy under the budget, paid
 * once or subscribed, retried with the credential in `_meta`, and recorded in the ledger — checked
 * against the receipt, the ledger and on-chain balances, over a real devnet and facilitator.
 */
import type { ToolMessage } from "@langchain/core/messages";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BudgetLimitsInput } from "../src/agent/budget/budgetLimits.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type DiscoverToolsOptions, discoverTools } from "../src/agent/discoverTools.ts";
import { createMcpConnections } from "../src/agent/mcp/mcpConnections.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import { createSpendCollector } from "../src/agent/spendReport.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, sellerNamed, startAgentStack, usdBalanceOf } from "./support/agentStack.ts";

const MONTH = 30 * 86_400;
const TEXT =
  "The harbour reopened on Monday after a week of storms. Fishing boats returned before dawn. " +
  "Traders said the catch was excellent and prices fell. The council promised new breakwaters by spring.";

let stack: AgentStack;
const connections = createMcpConnections();

beforeAll(async () => {
  stack = await startAgentStack();
}, 180_000);

afterAll(async () => {
  await connections.close();
  await stack?.stop();
});

const mcpUrl = (name: string) => sellerNamed(stack, name).specialist.manifest!.mcp!.url;

/** A fresh agent with its own funded key and budget, its tools found through `discovery`. */
async function newAgent(
  name: string,
  limits: BudgetLimitsInput,
  discovery: Partial<DiscoverToolsOptions>,
  forecast: Record<string, number> = {},
) {
  const account = privateKeyToAccount(generatePrivateKey());
  await stack.devnet.fund(account.address, { usd: 5_000_000n });
  const payer = createPayer({ account, network: stack.devnet.network, facilitator: stack.tf.url });
  const budget = createBudgetLedger({ store: stack.tf.store, clock: systemClock });
  await budget.setLimits(name, limits);
  const spend = createSpendCollector();
  const tools = await discoverTools({
    agent: name,
    payer,
    budget,
    calls: createCallCounter({ clock: systemClock }),
    mcpConnections: connections,
    forecast: (tool) => {
      const calls = forecast[tool];
      return calls === undefined ? undefined : { calls, horizonSeconds: MONTH };
    },
    onSpend: spend.record,
    ...discovery,
  });
  let calls = 0;
  const call = async (toolName: string, args: Record<string, unknown>) => {
    const found = tools.find((t) => t.tool.name === toolName);
    if (found === undefined) throw new Error(`no tool ${toolName} in ${tools.map((t) => t.tool.name)}`);
    calls += 1;
    const message = (await found.tool.invoke({
      type: "tool_call",
      id: `${name}-${calls}`,
      name: toolName,
      args,
    })) as ToolMessage;
    return { content: String(message.content), receipt: message.artifact as PaidToolReceipt };
  };
  return { account, payer, budget, spend, tools, call };
}

describe("an agent buying from MCP servers", () => {
  it("discovers a seller's tools by its MCP URL, pays once for a light forecast, and the ledger, receipt and chain agree", async () => {
    const summarizer = sellerNamed(stack, "summarizer");
    const agent = await newAgent(
      "mcp-light",
      { total: 1_000_000n },
      { mcpServers: [mcpUrl("summarizer")] },
      { summarize: 1 },
    );
    expect(agent.tools.map((t) => t.tool.name)).toEqual(["summarize"]);
    expect(agent.tools[0]!.capability.url).toBe(`${mcpUrl("summarizer")}#summarize`);
    expect(agent.tools[0]!.tool.description).toContain("Price: 0.02 USDC per call");
    const sellerBefore = await usdBalanceOf(stack, summarizer.account.address);
    const { content, receipt } = await agent.call("summarize", { text: TEXT, sentences: 1 });
    expect(JSON.parse(content)).toHaveProperty("summary");
    expect(receipt).toMatchObject({ tool: "summarize", mode: "one-time", amount: "0.02" });
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect((await agent.budget.report("mcp-light")).spent.total).toBe(20_000n);
    expect(await usdBalanceOf(stack, agent.account.address)).toBe(5_000_000n - 20_000n);
    expect((await usdBalanceOf(stack, summarizer.account.address)) - sellerBefore).toBe(20_000n);
  });

  it("subscribes for a heavy forecast, then calls on the subscription credential in _meta without paying again", async () => {
    const agent = await newAgent(
      "mcp-heavy",
      { total: 1_000_000n },
      { mcpServers: [mcpUrl("summarizer")] },
      { summarize: 100 },
    );
    const receipts: PaidToolReceipt[] = [];
    for (let i = 0; i < 3; i++)
      receipts.push((await agent.call("summarize", { text: TEXT, sentences: 1 })).receipt);
    expect(receipts.map((r) => [r.mode, r.amount])).toEqual([
      ["subscription", "0.05"],
      ["subscription", "0"],
      ["subscription", "0"],
    ]);
    expect(receipts[0]!.reason).toMatch(/subscribe/);
    expect(await usdBalanceOf(stack, agent.account.address)).toBe(5_000_000n - 50_000n);
  });

  it("holds to the budget: a price over the total limit is refused as BudgetExceeded and nothing moves", async () => {
    const agent = await newAgent(
      "mcp-tight",
      { total: 10_000n },
      { mcpServers: [mcpUrl("summarizer")] },
      { summarize: 1 },
    );
    const { content, receipt } = await agent.call("summarize", { text: TEXT, sentences: 1 });
    expect(content, JSON.stringify(receipt)).toMatch(/^ERROR BudgetExceeded/);
    expect(receipt).toMatchObject({ amount: "0", paid: false });
    expect(await usdBalanceOf(stack, agent.account.address)).toBe(5_000_000n);
    expect((await agent.budget.report("mcp-tight")).spent.total).toBe(0n);
  });

  it("buys market sellers over MCP when asked, held to their signed listing, and the catalog names the endpoint", async () => {
    const agent = await newAgent(
      "mcp-market",
      { total: 1_000_000n },
      { market: stack.market.url, transport: "mcp", search: { q: "detect language" } },
      { "detect-language": 1 },
    );
    const detect = agent.tools.find((t) => t.tool.name === "detect-language")!;
    expect(detect.capability.url).toBe(`${mcpUrl("linguist")}#detect-language`);
    const { content, receipt } = await agent.call("detect-language", {
      text: "Le chat dort sur le canapé rouge.",
    });
    expect(JSON.parse(content)).toMatchObject({ language: "fr" });
    expect(receipt).toMatchObject({
      mode: "one-time",
      amount: "0.005",
      provider: sellerNamed(stack, "linguist").account.address,
    });
  });

  it("buys a reseller's brief over MCP: its sale is admitted in its budget and funds its own purchases", async () => {
    const agent = await newAgent(
      "mcp-brief",
      { total: 1_000_000n },
      { mcpServers: [mcpUrl("reseller")] },
      { brief: 1 },
    );
    const resoldBefore = stack.marketplace.resellerSpend.filter((e) => e.ok).length;
    const { content, receipt } = await agent.call("brief", { text: TEXT });
    expect(JSON.parse(content)).toHaveProperty("mood");
    expect(receipt).toMatchObject({ mode: "one-time", amount: "0.08" });
    const resold = stack.marketplace.resellerSpend.filter((e) => e.ok).slice(resoldBefore);
    expect(new Set(resold.map((e) => e.tool))).toEqual(new Set(["summarize", "sentiment"]));
  });

  it("refuses a brief unpaid when the reseller's per-provider limit cannot take the summary it would buy", async () => {
    const summarizer = sellerNamed(stack, "summarizer").account.address;
    const resellerBudget = createBudgetLedger({ store: stack.tf.store, clock: systemClock });
    const limits = (await resellerBudget.getLimits("reseller"))!;
    const spent =
      (await resellerBudget.report("reseller")).perProvider.find(
        (p) => p.provider.toLowerCase() === summarizer.toLowerCase(),
      )?.spent ?? 0n;
    // Room for half a summary with the summarizer: the sale's part for it cannot be reserved.
    await resellerBudget.setLimits("reseller", {
      ...limits,
      perProvider: { ...limits.perProvider, [summarizer]: spent + 10_000n },
    });
    try {
      const agent = await newAgent(
        "mcp-brief-capped",
        { total: 1_000_000n },
        { mcpServers: [mcpUrl("reseller")] },
        { brief: 1 },
      );
      const { content, receipt } = await agent.call("brief", { text: TEXT });
      expect(content).toMatch(/^ERROR SaleNotAdmitted: .*limit cannot take the 0\.02 USDC a sale pays/);
      expect(receipt).toMatchObject({ paid: false, amount: "0" });
      expect(await usdBalanceOf(stack, agent.account.address)).toBe(5_000_000n);
    } finally {
      await resellerBudget.setLimits("reseller", limits);
    }
  });

  it("charges a metered subscription's overage from the units the seller states in _meta", async () => {
    const agent = await newAgent(
      "mcp-metered",
      { total: 2_000_000n },
      { mcpServers: [mcpUrl("sentiment")] },
      { sentiment: 50 },
    );
    const receipts: PaidToolReceipt[] = [];
    for (let i = 0; i < 7; i++)
      receipts.push((await agent.call("sentiment", { text: "A wonderful happy day." })).receipt);
    // 5 units included, then 0.002 each.
    expect(receipts.map((r) => r.amount)).toEqual(["0.05", "0", "0", "0", "0", "0.002", "0.002"]);
  });
});
