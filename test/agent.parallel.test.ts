/**
 * A model run over paid tools, on a devnet with a facilitator, a market and real sellers, driven by a
 * real `ChatOpenAI` (from `OPENAI_BASE_URL`) against a scripted chat-completions server:
 * - the tool descriptions the model receives state each tool's price and mode;
 * - the three calls of one turn reach their sellers at the same time (each seller records when a
 *   request starts and ends; all three start before any ends), an identical fourth call is made once,
 *   and the receipts come back to the model and to the user's callbacks;
 * - the budget holds under that concurrency: with room for two calls, exactly two are paid;
 * - a call above the agent's approval threshold pauses the run and goes on only with a yes;
 * - the market search tool finds a capability the run was not given and the model then buys it;
 * - the rule planner (no model) runs its plan's independent calls through the same queue: three sellers
 *   are inside a request at once, and the budget holds the same way.
 */
import { BaseCallbackHandler } from "@langchain/core/callbacks/base";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { BudgetLimitsInput } from "../src/agent/budget/budgetLimits.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import { modelFromEnv } from "../src/agent/orchestrator/modelFromEnv.ts";
import { approvalHook, type SpendApprovalRequest } from "../src/agent/orchestrator/spendApproval.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import type { Capability } from "../src/agent/tools/capability.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { registerProvider } from "../src/client/registerProvider.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";
import { type ChatScript, type OpenAiServer, startOpenAiServer } from "./support/openAiServer.ts";

const FUNDS = 1_000_000n;
const PROBES = ["probe-a", "probe-b", "probe-c"] as const;

let stack: AgentStack;
let server: OpenAiServer | undefined;
const sellers: Specialist[] = [];
/** What the probe sellers saw, in order: `start <name>` and `end <name>`. */
let sellerLog: string[] = [];
/** How many requests must have started before any probe answers (0: answer at once). */
let barrierSize = 0;
let waiting: (() => void)[] = [];

/**
 * A probe capability: records its start, waits until `barrierSize` probe requests have started (or
 * five seconds, so calls made one at a time fail the overlap assertion instead of hanging), records
 * its end.
 */
function probe(name: string, topic: string): Capability {
  return {
    name,
    description: `Looks up ${topic} facts about a text.`,
    input: z.object({ text: z.string() }),
    output: z.object({ probe: z.string(), length: z.number() }),
    pricing: [{ type: "one-time", price: "0.01" }],
    handler: async ({ text }: { text: string }) => {
      sellerLog.push(`start ${name}`);
      const started = sellerLog.filter((line) => line.startsWith("start ")).length;
      if (started >= barrierSize) {
        for (const wake of waiting.splice(0)) wake();
      } else {
        await new Promise<void>((resolve) => {
          waiting.push(resolve);
          setTimeout(resolve, 5_000);
        });
      }
      sellerLog.push(`end ${name}`);
      return { probe: name, length: text.length };
    },
  } as Capability;
}

beforeAll(async () => {
  stack = await startAgentStack();
  const { devnet, tf, market } = stack;
  const facilitator = createFacilitatorClient({ url: tf.url, fetch: globalThis.fetch });
  const capabilities = [
    [probe("probe-a", "astronomy")],
    [probe("probe-b", "botany")],
    [probe("probe-c", "chemistry")],
    [probe("probe-x", "xylophone")],
  ];
  for (const [index, caps] of capabilities.entries()) {
    const account = privateKeyToAccount(generatePrivateKey());
    await registerProvider(facilitator, account);
    const specialist = createSpecialist({
      name: `probes-${index}`,
      account,
      capabilities: caps,
      facilitator: tf.url,
      network: devnet.network,
      token: devnet.contracts.usd,
      market: market.url,
    });
    await specialist.start();
    sellers.push(specialist);
  }
}, 180_000);

afterEach(async () => {
  await server?.close();
  server = undefined;
  sellerLog = [];
  waiting = [];
  barrierSize = 0;
});

afterAll(async () => {
  for (const seller of sellers) await seller.stop();
  await stack?.stop();
});

async function paidAgent(
  name: string,
  limits: BudgetLimitsInput,
  options: { approveAbove?: bigint; search?: { q: string } } = {},
) {
  const { devnet, tf, market } = stack;
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: FUNDS });
  const budget = createBudgetLedger({
    store: tf.store,
    clock: systemClock,
    // The ledger approves a spend only inside a call the orchestrator's interrupt got a yes for.
    ...(options.approveAbove === undefined
      ? {}
      : { approval: { threshold: options.approveAbove, hook: approvalHook() } }),
  });
  await budget.setLimits(name, limits);
  const paidOptions = {
    agent: name,
    payer: createPayer({ account, network: devnet.network, facilitator: tf.url }),
    budget,
    calls: createCallCounter({ clock: systemClock }),
  };
  const discovered = await discoverTools({
    market: market.url,
    ...paidOptions,
    ...(options.search === undefined ? {} : { search: options.search }),
  });
  const balance = () =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: account.address });
  return { budget, paidOptions, discovered, tools: discovered.map((d) => d.tool), balance };
}

const TEXT = "The comet passed the orchard at dawn.";

/** Turn 1: the three probes, and probe-a again with the same arguments; turn 2: the answer. */
const parallelScript: ChatScript = ({ turn, toolResults }) => {
  if (turn === 1) {
    return {
      toolCalls: [
        ...PROBES.map((name) => ({ name, arguments: { text: TEXT } })),
        { name: "probe-a", arguments: { text: TEXT } },
      ],
    };
  }
  return { content: `Done: ${toolResults.map((r) => `${r.name}=${r.content.split("\n")[0]}`).join("; ")}` };
};

class ReceiptTracer extends BaseCallbackHandler {
  name = "ReceiptTracer";
  readonly receipts: { tool: string; receipt: PaidToolReceipt }[] = [];
  readonly toolEnds: unknown[] = [];
  override handleCustomEvent(eventName: string, data: unknown) {
    if (eventName === "tollgate_receipt") {
      const { tool, receipt } = data as { tool: string; receipt: PaidToolReceipt };
      this.receipts.push({ tool, receipt });
    }
  }
  override handleToolEnd(output: unknown) {
    this.toolEnds.push((output as { artifact?: unknown }).artifact);
  }
}

describe("a model run over paid tools", () => {
  it("shows prices in the tool descriptions and runs a turn's three calls in parallel, an identical call once", async () => {
    server = await startOpenAiServer({ script: parallelScript });
    barrierSize = 3;
    const agent = await paidAgent("parallel-buyer", { total: 1_000_000n });
    const tracer = new ReceiptTracer();
    const model = modelFromEnv({ OPENAI_API_KEY: "test", OPENAI_BASE_URL: server.baseURL });
    if (model === "rules") throw new Error("expected a model");
    const run = await createOrchestrator({
      tools: agent.tools,
      model,
      budget: { ledger: agent.budget, agent: "parallel-buyer" },
      callbacks: [tracer],
    }).run("Probe this text.", { text: TEXT });

    // Prices, in the descriptions the model received.
    const offered = new Map(
      server.requests[0]!.tools!.map((t) => [t.function.name, t.function.description ?? ""]),
    );
    for (const name of PROBES) {
      expect(offered.get(name)).toMatch(/Price: 0\.01 USDC per call, paid once per call\.$/);
    }
    expect(offered.get("summarize")).toMatch(/Price: 0\.02 USDC per call, paid once per call/);
    expect(offered.get("sentiment")).toMatch(
      /Price: metered subscription [\d.]+ USDC every 30 days with \d+ units included, then [\d.]+ USDC per unit; a call uses 1 unit\.$/,
    );

    // All three sellers were inside a request at once: every start comes before the first end.
    expect(sellerLog).toHaveLength(6);
    const firstEnd = sellerLog.findIndex((line) => line.startsWith("end "));
    expect(sellerLog.slice(0, firstEnd).sort()).toEqual(["start probe-a", "start probe-b", "start probe-c"]);

    // Four calls, three requests: the identical one shares the first's result and is not paid again.
    expect(run.steps.map((s) => [s.tool, s.error, s.duplicateOf])).toEqual([
      ["probe-a", undefined, undefined],
      ["probe-b", undefined, undefined],
      ["probe-c", undefined, undefined],
      ["probe-a", undefined, run.steps[0]!.callId],
    ]);
    expect(run.steps[3]!.result).toBe(run.steps[0]!.result);
    const receipts = run.steps.slice(0, 3).map((s) => s.artifact as PaidToolReceipt);
    expect(receipts.map((r) => [r.mode, r.amount])).toEqual([
      ["one-time", "0.01"],
      ["one-time", "0.01"],
      ["one-time", "0.01"],
    ]);
    expect(FUNDS - (await agent.balance())).toBe(30_000n);
    expect((await agent.budget.report("parallel-buyer")).spent.total).toBe(30_000n);

    // The receipt is summarised for the model and reaches the user's callbacks.
    const toolMessages = server.requests[1]!.messages.filter((m) => m.role === "tool");
    expect(toolMessages).toHaveLength(4);
    expect(String(toolMessages[0]!.content)).toMatch(
      new RegExp(
        `\\n\\nReceipt: paid 0\\.01 USDC \\(one-time\\) to 0x[0-9a-fA-F]{40}, transaction ${receipts[0]!.transaction}\\.$`,
      ),
    );
    expect(tracer.receipts.map((r) => r.tool).sort()).toEqual([...PROBES].sort());
    expect(tracer.toolEnds.filter((a) => a !== undefined)).toHaveLength(3);
    expect(run.answer).toContain("probe-c=");
  });

  it("holds the budget when the calls run at once: room for two of three, two are paid", async () => {
    server = await startOpenAiServer({
      script: ({ turn }) =>
        turn === 1
          ? { toolCalls: PROBES.map((name) => ({ name, arguments: { text: TEXT } })) }
          : { content: "done" },
    });
    const agent = await paidAgent("tight-buyer", { total: 25_000n });
    const model = modelFromEnv({ OPENAI_API_KEY: "test", OPENAI_BASE_URL: server.baseURL });
    if (model === "rules") throw new Error("expected a model");
    const run = await createOrchestrator({
      tools: agent.tools,
      model,
      budget: { ledger: agent.budget, agent: "tight-buyer" },
    }).run("Probe.", { text: TEXT });

    const errors = run.steps.map((s) => s.error).filter((e) => e !== undefined);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^BudgetExceeded: /);
    expect(sellerLog.filter((l) => l.startsWith("start "))).toHaveLength(2);
    expect(FUNDS - (await agent.balance())).toBe(20_000n);
    const report = await agent.budget.report("tight-buyer");
    expect(report.spent.total).toBe(20_000n);
    expect(report.reserved.total).toBe(0n);
  });

  it("pauses for approval above the threshold and makes only the approved calls", async () => {
    server = await startOpenAiServer({
      script: ({ turn }) =>
        turn === 1
          ? { toolCalls: ["probe-a", "probe-b"].map((name) => ({ name, arguments: { text: TEXT } })) }
          : { content: "done" },
    });
    const agent = await paidAgent("careful-buyer", { total: 1_000_000n }, { approveAbove: 5_000n });
    const asked: SpendApprovalRequest[] = [];
    const model = modelFromEnv({ OPENAI_API_KEY: "test", OPENAI_BASE_URL: server.baseURL });
    if (model === "rules") throw new Error("expected a model");
    const run = await createOrchestrator({
      tools: agent.tools,
      model,
      budget: { ledger: agent.budget, agent: "careful-buyer" },
      approveAbove: 5_000n,
      approve: (request) => {
        asked.push(request);
        return request.tool === "probe-a";
      },
    }).run("Probe.", { text: TEXT });

    expect(asked.map((r) => [r.tool, r.maxAmount, r.threshold]).sort()).toEqual([
      ["probe-a", 10_000n, 5_000n],
      ["probe-b", 10_000n, 5_000n],
    ]);
    expect(run.steps.map((s) => [s.tool, s.error?.split(":")[0]])).toEqual([
      ["probe-a", undefined],
      ["probe-b", "ApprovalDenied"],
    ]);
    expect(sellerLog).toEqual(["start probe-a", "end probe-a"]);
    expect(FUNDS - (await agent.balance())).toBe(10_000n);
  });

  it("finds a capability it was not given through the market search tool and buys it", async () => {
    server = await startOpenAiServer({
      script: ({ turn }) => {
        if (turn === 1) return { toolCalls: [{ name: "search_market", arguments: { query: "xylophone" } }] };
        if (turn === 2) return { toolCalls: [{ name: "probe-x", arguments: { text: TEXT } }] };
        return { content: "found and bought" };
      },
    });
    const agent = await paidAgent("curious-buyer", { total: 1_000_000n }, { search: { q: "summary" } });
    expect(agent.tools.map((t) => t.name)).not.toContain("probe-x");
    const model = modelFromEnv({ OPENAI_API_KEY: "test", OPENAI_BASE_URL: server.baseURL });
    if (model === "rules") throw new Error("expected a model");
    const run = await createOrchestrator({
      tools: agent.tools,
      model,
      budget: { ledger: agent.budget, agent: "curious-buyer" },
      findTools: async (search) =>
        (await discoverTools({ market: stack.market.url, ...agent.paidOptions, search })).map((d) => ({
          tool: d.tool as StructuredToolInterface,
          seller: d.seller,
        })),
    }).run("Find something that knows about xylophones.");

    expect(server.requests[0]!.tools!.map((t) => t.function.name)).toContain("search_market");
    expect(server.requests[0]!.tools!.map((t) => t.function.name)).not.toContain("probe-x");
    const second = server.requests[1]!.tools!.find((t) => t.function.name === "probe-x");
    expect(second?.function.description).toMatch(/Price: 0\.01 USDC per call/);
    expect(run.steps.map((s) => [s.tool, s.error])).toEqual([
      ["search_market", undefined],
      ["probe-x", undefined],
    ]);
    expect(run.steps[0]!.result).toMatch(/probe-x .*Price: 0\.01 USDC per call/);
    expect((run.steps[1]!.artifact as PaidToolReceipt).amount).toBe("0.01");
    expect(FUNDS - (await agent.balance())).toBe(10_000n);
  });

  it("rule planner: runs a plan's three calls to three sellers at once through the queue", async () => {
    barrierSize = 3;
    const agent = await paidAgent("rules-parallel-buyer", { total: 1_000_000n });
    const events: string[] = [];
    const run = await createOrchestrator({
      tools: agent.tools,
      onEvent: (event) => {
        if (event.type === "tool:start") events.push(`start ${event.tool}`);
      },
    }).run("Look up astronomy, botany and chemistry facts about the text.", { text: TEXT });

    expect(run.planner).toBe("rules");
    expect(run.steps.map((s) => [s.tool, s.error])).toEqual([
      ["probe-a", undefined],
      ["probe-b", undefined],
      ["probe-c", undefined],
    ]);
    const firstEnd = sellerLog.findIndex((line) => line.startsWith("end "));
    expect(sellerLog.slice(0, firstEnd).sort()).toEqual(["start probe-a", "start probe-b", "start probe-c"]);
    expect(events.sort()).toEqual(["start probe-a", "start probe-b", "start probe-c"]);
    expect((await agent.budget.report("rules-parallel-buyer")).spent.total).toBe(30_000n);
    expect(FUNDS - (await agent.balance())).toBe(30_000n);
  });

  it("rule planner: holds the budget when its calls run at once: room for two of three, two are paid", async () => {
    const agent = await paidAgent("rules-tight-buyer", { total: 25_000n });
    const run = await createOrchestrator({ tools: agent.tools }).run(
      "Look up astronomy, botany and chemistry facts about the text.",
      { text: TEXT },
    );
    const errors = run.steps.map((s) => s.error).filter((e) => e !== undefined);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^BudgetExceeded: /);
    expect(sellerLog.filter((l) => l.startsWith("start "))).toHaveLength(2);
    expect(FUNDS - (await agent.balance())).toBe(20_000n);
    const report = await agent.budget.report("rules-tight-buyer");
    expect([report.spent.total, report.reserved.total]).toEqual([20_000n, 0n]);
  });
});
