/**
 * The LangChain path end to end: a real `ChatOpenAI` client (its `baseURL` pointed at a local server
 * that speaks the chat-completions protocol and answers with tool calls) drives the paid tools an
 * agent discovered in the market. Payments settle on the devnet, the results go back to the model,
 * and its final answer arrives.
 */
import { ChatOpenAI } from "@langchain/openai";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { summarizeText } from "../agents/summarizer.ts";
import type { BudgetLimitsInput } from "../src/agent/budget/budgetLimits.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import { createSpendCollector } from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import type { Devnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import type { RunningServer } from "../src/facilitator/createFacilitator.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";
import type { TestFacilitator } from "./support/facilitatorHarness.ts";
import { type ChatScript, type OpenAiServer, startOpenAiServer } from "./support/openAiServer.ts";

const TEXT =
  "The new library opened downtown to great excitement. Families loved the bright reading rooms. " +
  "Volunteers taught free coding classes for children. The mayor called it a wonderful gift to the city.";
const FUNDS = 2_000_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let market: RunningServer;
let stack: AgentStack | undefined;
let server: OpenAiServer | undefined;

beforeAll(async () => {
  stack = await startAgentStack();
  ({ devnet, tf, market } = stack);
}, 120_000);

afterEach(async () => {
  await server?.close();
  server = undefined;
});

afterAll(async () => {
  await stack?.stop();
});

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function paidAgent(name: string, limits: BudgetLimitsInput) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: FUNDS });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, limits);
  const spend = createSpendCollector();
  const discovered = await discoverTools({
    market: market.url,
    agent: name,
    payer: createPayer({ account, network: devnet.network, facilitator: tf.url }),
    budget,
    calls: createCallCounter({ clock: systemClock }),
    onSpend: spend.record,
  });
  return { account, budget, spend, tools: discovered.map((d) => d.tool) };
}

/** The model: summarize, detect the language and buy a brief of the text, then answer from the results. */
const buyingScript: ChatScript = ({ turn, userText, toolResults }) => {
  if (turn === 1) {
    const { text } = JSON.parse(userText.slice(userText.indexOf("{"))) as { text: string };
    return {
      toolCalls: [
        { name: "summarize", arguments: { text, sentences: 1 } },
        { name: "detect-language", arguments: { text } },
        { name: "brief", arguments: { text } },
      ],
    };
  }
  const lines = toolResults.map((result) => {
    // The orchestrator hands a failed call back as `Error: <code>: <message>`.
    if (result.content.startsWith("Error: ")) return `${result.name}: not bought (${result.content})`;
    // A paid result is followed by its receipt in words: "\n\nReceipt: paid … USDC (…) …".
    const output = JSON.parse(result.content.split("\n\nReceipt: ")[0]!) as {
      summary?: string;
      language?: string;
      mood?: string;
    };
    return `${result.name}: ${output.mood ?? output.language ?? output.summary}`;
  });
  return { content: `Report:\n${lines.join("\n")}` };
};

describe("ChatOpenAI drives discovered paid tools", () => {
  for (const streaming of [false, true]) {
    it(`pays for the model's tool calls, hands the results back and returns its answer (${streaming ? "streaming" : "JSON"})`, async () => {
      server = await startOpenAiServer({ script: buyingScript });
      const agent = await paidAgent(`chat-${streaming ? "stream" : "json"}`, { total: 1_000_000n });
      const model = new ChatOpenAI({
        apiKey: "test",
        model: "gpt-4o-mini",
        streaming,
        maxRetries: 0,
        configuration: { baseURL: server.baseURL },
      });
      const run = await createOrchestrator({ tools: agent.tools, model }).run(
        "Summarize this text, tell me its language and get a brief of it.",
        { text: TEXT },
      );

      expect(run.planner).toBe("gpt-4o-mini");
      expect(run.steps.map((s) => [s.tool, s.error])).toEqual([
        ["summarize", undefined],
        ["detect-language", undefined],
        ["brief", undefined],
      ]);
      const receipts = run.steps.map((s) => s.artifact as PaidToolReceipt);
      expect(receipts.map((r) => [r.mode, r.amount])).toEqual([
        ["one-time", "0.02"],
        ["one-time", "0.005"],
        ["one-time", "0.08"],
      ]);
      expect(receipts.every((r) => /^0x[0-9a-f]{64}$/.test(r.transaction ?? ""))).toBe(true);

      // The results went back to the model, answering its calls by id.
      expect(server.requests).toHaveLength(2);
      expect(server.requests[0]!.tools?.map((t) => t.function.name).sort()).toEqual(
        ["brief", "detect-language", "notarize", "sentiment", "summarize"].sort(),
      );
      const toolMessages = server.requests[1]!.messages.filter((m) => m.role === "tool");
      expect(toolMessages.map((m) => m.tool_call_id)).toEqual(["call_1_1", "call_1_2", "call_1_3"]);
      const [result, receipt] = String(toolMessages[0]!.content).split("\n\nReceipt: ");
      expect(JSON.parse(result!)).toMatchObject({ summary: summarizeText(TEXT, 1).summary });
      expect(receipt).toBe(
        `paid 0.02 USDC (one-time) to ${receipts[0]!.provider}, transaction ${receipts[0]!.transaction}.`,
      );
      expect(run.answer).toBe(
        [
          "Report:",
          `summarize: ${summarizeText(TEXT, 1).summary}`,
          "detect-language: en",
          "brief: positive",
        ].join("\n"),
      );

      // What was paid on chain is what the ledger and the spend report hold.
      const paid = 105_000n; // 0.02 + 0.005 + 0.08
      expect(FUNDS - (await balanceOf(agent.account.address))).toBe(paid);
      expect((await agent.budget.report(`chat-${streaming ? "stream" : "json"}`)).spent.total).toBe(paid);
      expect(agent.spend.report().total).toBe(paid);
    });
  }

  it("gives the model a BudgetExceeded text for a call the budget cannot cover, and pays nothing for it", async () => {
    server = await startOpenAiServer({ script: buyingScript });
    // Room for the summary and the language, not for the brief.
    const agent = await paidAgent("chat-tight", { total: 30_000n, maxSubscriptionCommitment: 0n });
    const model = new ChatOpenAI({
      apiKey: "test",
      maxRetries: 0,
      configuration: { baseURL: server.baseURL },
    });
    const run = await createOrchestrator({ tools: agent.tools, model }).run("Brief it.", { text: TEXT });

    expect(run.steps.map((s) => s.tool)).toEqual(["summarize", "detect-language", "brief"]);
    const toolMessages = server.requests[1]!.messages.filter((m) => m.role === "tool");
    expect(String(toolMessages[2]!.content)).toMatch(/^Error: BudgetExceeded: /);
    expect(run.steps[2]!.error).toMatch(/^BudgetExceeded: /);
    expect((run.steps[2]!.artifact as PaidToolReceipt).amount).toBe("0");
    expect(run.answer).toContain("brief: not bought (Error: BudgetExceeded: ");
    expect(FUNDS - (await balanceOf(agent.account.address))).toBe(25_000n);
    expect((await agent.budget.report("chat-tight")).spent.total).toBe(25_000n);
  });
});
