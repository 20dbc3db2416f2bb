import { ToolMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { isTollgateError, TollgateError } from "../../protocol/errors.ts";
import { createOrchestrator } from "./createOrchestrator.ts";
import type { OrchestratorEvent } from "./orchestratorEvent.ts";

const calls: string[] = [];
const upper = tool(
  async ({ text }) => {
    calls.push(`upper ${text}`);
    return JSON.stringify({ upper: text.toUpperCase() });
  },
  { name: "uppercase", description: "Uppercase a text.", schema: z.object({ text: z.string() }) },
);
const count = tool(async ({ text }) => JSON.stringify({ words: text.split(/\s+/).length }), {
  name: "count-words",
  description: "Count the words of a text.",
  schema: z.object({ text: z.string() }),
});
const paidCount = tool(
  async ({ text }) => [JSON.stringify({ words: text.split(/\s+/).length }), { receipt: { amount: "5000" } }],
  {
    name: "count-words",
    description: "Count the words of a text (paid).",
    schema: z.object({ text: z.string() }),
    responseFormat: "content_and_artifact",
  },
);
const documents = [
  { id: "a", title: "First", text: "one two three" },
  { id: "b", text: "four five" },
];

describe("createOrchestrator with the rule planner", () => {
  it("runs the plan's calls in order and answers, naming the rule planner", async () => {
    calls.length = 0;
    const orchestrator = createOrchestrator({ tools: [upper, count] });
    expect(orchestrator.planner).toBe("rules");
    const run = await orchestrator.run("Uppercase each document and count its words", { documents });
    expect(run.planner).toBe("rules");
    expect(calls).toEqual(["upper one two three", "upper four five"]);
    expect(
      run.steps.map(({ index, callId, tool: name, args, result, document }) => ({
        index,
        callId,
        name,
        args,
        result,
        document,
      })),
    ).toEqual([
      {
        index: 0,
        callId: "rules_1",
        name: "uppercase",
        args: { text: "one two three" },
        result: '{"upper":"ONE TWO THREE"}',
        document: "a",
      },
      {
        index: 1,
        callId: "rules_2",
        name: "count-words",
        args: { text: "one two three" },
        result: '{"words":3}',
        document: "a",
      },
      {
        index: 2,
        callId: "rules_3",
        name: "uppercase",
        args: { text: "four five" },
        result: '{"upper":"FOUR FIVE"}',
        document: "b",
      },
      {
        index: 3,
        callId: "rules_4",
        name: "count-words",
        args: { text: "four five" },
        result: '{"words":2}',
        document: "b",
      },
    ]);
    expect(run.answer.split("\n")).toEqual([
      'Answer by the rule planner (deterministic, no language model) for: "Uppercase each document and count its words"',
      "Tools: uppercase (matched uppercase); count-words (matched count, word).",
      "",
      "a — First",
      "- uppercase: upper: ONE TWO THREE",
      "- count-words: words: 3",
      "",
      "b",
      "- uppercase: upper: FOUR FIVE",
      "- count-words: words: 2",
    ]);
    expect(run.plan?.forecast).toEqual({ uppercase: 2, "count-words": 2 });
  });

  it("emits plan, tool start/end with artifacts (calls running at once), and answer events in order", async () => {
    const events: OrchestratorEvent[] = [];
    const orchestrator = createOrchestrator({
      tools: [paidCount],
      onEvent: (event) => void events.push(event),
    });
    await orchestrator.run("Count the words of each document", { documents });
    // The plan's two calls run at once (runPlanCalls.ts): both start before either ends.
    expect(events.map((event) => event.type)).toEqual([
      "plan",
      "tool:start",
      "tool:start",
      "tool:end",
      "tool:end",
      "answer",
    ]);
    const ends = events.filter((event) => event.type === "tool:end");
    expect(ends.map((event) => event.step.artifact)).toEqual([
      { receipt: { amount: "5000" } },
      { receipt: { amount: "5000" } },
    ]);
    expect(events[1]).toEqual({
      type: "tool:start",
      index: 0,
      callId: "rules_1",
      tool: "count-words",
      args: { text: "one two three" },
      document: "a",
    });
  });

  it("records a failing tool as a step with its error code and carries on", async () => {
    const failing = tool(
      async () => {
        throw new TollgateError("BudgetExceeded", "per-call limit is 0.01 USDC");
      },
      { name: "uppercase", description: "Uppercase a text.", schema: z.object({ text: z.string() }) },
    );
    const run = await createOrchestrator({ tools: [failing, count] }).run(
      "Uppercase and count words of each document",
      {
        documents,
      },
    );
    expect(run.steps.map((step) => step.error)).toEqual([
      "BudgetExceeded: per-call limit is 0.01 USDC",
      undefined,
      "BudgetExceeded: per-call limit is 0.01 USDC",
      undefined,
    ]);
    expect(run.answer).toContain("- uppercase: failed: BudgetExceeded: per-call limit is 0.01 USDC");
    expect(run.answer).toContain("2 of 4 calls failed.");
  });

  it("treats an error ToolMessage or an artifact error as a failure", async () => {
    const statusError = tool(
      async (_input, config) =>
        new ToolMessage({
          content: "PaymentRequired: no way to pay",
          tool_call_id: config.toolCall?.id ?? "",
          status: "error",
        }),
      { name: "uppercase", description: "Uppercase a text.", schema: z.object({ text: z.string() }) },
    );
    const artifactError = tool(
      async () => ["could not buy", { error: { code: "ApprovalDenied", message: "owner said no" } }],
      {
        name: "count-words",
        description: "Count words.",
        schema: z.object({ text: z.string() }),
        responseFormat: "content_and_artifact",
      },
    );
    const run = await createOrchestrator({ tools: [statusError, artifactError] }).run(
      "Uppercase and count words",
      {
        text: "hello there",
      },
    );
    expect(run.steps.map((step) => step.error)).toEqual([
      "PaymentRequired: no way to pay",
      "ApprovalDenied: owner said no",
    ]);
    expect(run.steps[1]?.artifact).toEqual({ error: { code: "ApprovalDenied", message: "owner said no" } });
  });

  it("recognizes a paid tool's ERROR <Code>: text as a failure", async () => {
    const paid = tool(async () => ["ERROR InsufficientFunds: the payer holds 0.01 USDC", { mode: "free" }], {
      name: "uppercase",
      description: "Uppercase a text.",
      schema: z.object({ text: z.string() }),
      responseFormat: "content_and_artifact",
    });
    const run = await createOrchestrator({ tools: [paid] }).run("Uppercase", { text: "x" });
    expect(run.steps[0]).toMatchObject({
      error: "InsufficientFunds: the payer holds 0.01 USDC",
      artifact: { mode: "free" },
    });
  });

  it("stops when the run is cancelled", async () => {
    const controller = new AbortController();
    const cancelling = tool(
      async ({ text }) => {
        controller.abort(new Error("cancelled by the user"));
        return text;
      },
      { name: "uppercase", description: "Uppercase a text.", schema: z.object({ text: z.string() }) },
    );
    const orchestrator = createOrchestrator({ tools: [cancelling] });
    await expect(
      orchestrator.run("Uppercase each document", { documents }, { signal: controller.signal }),
    ).rejects.toThrow("cancelled by the user");
  });

  it("forecasts calls per tool for the policy without running anything", () => {
    calls.length = 0;
    const orchestrator = createOrchestrator({ tools: [upper, count] });
    expect(orchestrator.forecast("Uppercase every document", { documents })).toEqual({ uppercase: 2 });
    expect(calls).toEqual([]);
  });

  it("refuses two tools with one name, a model that cannot call tools, and malformed inputs", async () => {
    expect(() => createOrchestrator({ tools: [count, paidCount] })).toThrow(
      /two tools are named "count-words"/,
    );
    expect(() => createOrchestrator({ tools: [count], model: {} as never })).toThrow(/cannot call tools/);
    const failure = await createOrchestrator({ tools: [count] })
      .run("Count", { documents: [{ id: "", text: "" }] })
      .catch((error: unknown) => error);
    expect(isTollgateError(failure, "InvalidRequest")).toBe(true);
  });
});
