/**
 * The orchestrator's model path with a real `ChatOpenAI` over HTTP, against a local server that speaks
 * the chat-completions protocol (the LLM API itself is out of reach). The tools are the real offline
 * capabilities of agents/.
 */
import { tool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { languageDetector } from "../agents/languageDetector.ts";
import { loadDocuments } from "../agents/loadDocuments.ts";
import { sentimentScorer } from "../agents/sentimentScorer.ts";
import { summarizer, summarizeText } from "../agents/summarizer.ts";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import { modelFromEnv } from "../src/agent/orchestrator/modelFromEnv.ts";
import type { PlannerDocument } from "../src/agent/planner/plannerInputs.ts";
import { capabilityTool } from "../src/agent/tools/capabilityTool.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { type ChatScript, type OpenAiServer, startOpenAiServer } from "./support/openAiServer.ts";

const localTools = () =>
  [summarizer, sentimentScorer, languageDetector].map((capability) => capabilityTool(capability));

/**
 * A scripted model: first it summarizes each input document in one sentence and detects the language
 * of the first, then it answers from the tool results it was sent back.
 */
const researchScript: ChatScript = ({ turn, userText, toolResults }) => {
  if (turn === 1) {
    const inputs = JSON.parse(userText.slice(userText.indexOf("{"))) as { documents: PlannerDocument[] };
    return {
      toolCalls: [
        ...inputs.documents.map((document) => ({
          name: "summarize",
          arguments: { text: document.text, sentences: 1 },
        })),
        { name: "detect-language", arguments: { text: inputs.documents[0]!.text } },
      ],
    };
  }
  const lines = toolResults.map((result) => {
    const output = JSON.parse(result.content) as { summary?: string; language?: string };
    return `${result.name}: ${output.summary ?? output.language}`;
  });
  return { content: `Findings:\n${lines.join("\n")}` };
};

describe("orchestrator with ChatOpenAI against a local chat-completions server", () => {
  let server: OpenAiServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  for (const streaming of [false, true]) {
    it(`runs the model's tool calls with its arguments and answers from the results (${streaming ? "streaming" : "JSON"})`, async () => {
      server = await startOpenAiServer({ script: researchScript });
      const model = new ChatOpenAI({
        apiKey: "test",
        model: "gpt-4o-mini",
        streaming,
        maxRetries: 0,
        configuration: { baseURL: server.baseURL },
      });
      const documents = (await loadDocuments()).filter((document) =>
        ["en-rail-delays", "fr-jardin"].includes(document.id),
      );
      const events: string[] = [];
      const orchestrator = createOrchestrator({
        tools: localTools(),
        model,
        onEvent: (event) => {
          if (event.type === "tool:start") events.push(`tool:start:${event.index}`);
          else if (event.type === "tool:end") events.push(`tool:end:${event.step.index}`);
          else events.push(event.type);
        },
      });
      const run = await orchestrator.run("Summarize each document and tell me the first one's language.", {
        documents,
      });

      expect(run.planner).toBe("gpt-4o-mini");
      expect(run.steps.map((step) => ({ tool: step.tool, args: step.args, error: step.error }))).toEqual([
        { tool: "summarize", args: { text: documents[0]!.text, sentences: 1 }, error: undefined },
        { tool: "summarize", args: { text: documents[1]!.text, sentences: 1 }, error: undefined },
        { tool: "detect-language", args: { text: documents[0]!.text }, error: undefined },
      ]);
      expect(run.answer).toBe(
        [
          "Findings:",
          `summarize: ${summarizeText(documents[0]!.text, 1).summary}`,
          `summarize: ${summarizeText(documents[1]!.text, 1).summary}`,
          "detect-language: en",
        ].join("\n"),
      );
      // The turn's three calls run at once: each starts before it ends, in whatever order they finish.
      expect(events[0]).toBe("model");
      expect(events.slice(-2)).toEqual(["model", "answer"]);
      const calls = events.slice(1, -2);
      expect([...calls].sort()).toEqual([
        "tool:end:0",
        "tool:end:1",
        "tool:end:2",
        "tool:start:0",
        "tool:start:1",
        "tool:start:2",
      ]);
      for (const index of [0, 1, 2]) {
        expect(calls.indexOf(`tool:start:${index}`)).toBeLessThan(calls.indexOf(`tool:end:${index}`));
      }

      // What went over the wire: every tool offered with its JSON Schema, results sent back by call id.
      const [first, second] = server.requests;
      expect(server.requests).toHaveLength(2);
      expect(first!.stream ?? false).toBe(streaming);
      expect(first!.tools?.map((offered) => offered.function.name)).toEqual([
        "summarize",
        "sentiment",
        "detect-language",
      ]);
      expect(first!.tools?.[0]?.function.parameters).toMatchObject({
        type: "object",
        properties: { text: { type: "string" }, sentences: { type: "integer" } },
        required: ["text"],
      });
      expect(first!.messages[0]).toMatchObject({ role: "system" });
      const toolMessages = second!.messages.filter((message) => message.role === "tool");
      expect(toolMessages.map((message) => message.tool_call_id)).toEqual([
        "call_1_1",
        "call_1_2",
        "call_1_3",
      ]);
    });
  }

  it("hands a tool's failure back to the model as an error code it can act on", async () => {
    const seen: string[] = [];
    server = await startOpenAiServer({
      script: ({ turn, toolResults }) => {
        if (turn === 1) return { toolCalls: [{ name: "forecast", arguments: { city: "Porto" } }] };
        seen.push(toolResults[0]!.content);
        return { content: "The forecast could not be bought: the budget is exhausted." };
      },
    });
    const paid = tool(
      async () => {
        throw new TollgateError("BudgetExceeded", "daily budget of 1 USDC reached");
      },
      {
        name: "forecast",
        description: "Weather forecast for a city.",
        schema: z.object({ city: z.string() }),
      },
    );
    const model = new ChatOpenAI({
      apiKey: "test",
      maxRetries: 0,
      configuration: { baseURL: server.baseURL },
    });
    const run = await createOrchestrator({ tools: [paid], model }).run("Forecast for Porto?");
    expect(seen).toEqual(["Error: BudgetExceeded: daily budget of 1 USDC reached"]);
    expect(run.steps[0]).toMatchObject({
      tool: "forecast",
      args: { city: "Porto" },
      error: "BudgetExceeded: daily budget of 1 USDC reached",
    });
    expect(run.answer).toBe("The forecast could not be bought: the budget is exhausted.");
  });

  it("records a tool's artifact (a receipt) in the step and the tool:end event", async () => {
    server = await startOpenAiServer({
      script: ({ turn }) =>
        turn === 1
          ? { toolCalls: [{ name: "quote", arguments: { symbol: "ETH" } }] }
          : { content: "ETH is 3000." },
    });
    const receipt = { amount: "20000", transaction: "0xabc", scheme: "exact" };
    const quote = tool(async () => ["3000", receipt], {
      name: "quote",
      description: "Price quote.",
      schema: z.object({ symbol: z.string() }),
      responseFormat: "content_and_artifact",
    });
    const model = new ChatOpenAI({
      apiKey: "test",
      maxRetries: 0,
      configuration: { baseURL: server.baseURL },
    });
    const artifacts: unknown[] = [];
    const run = await createOrchestrator({
      tools: [quote],
      model,
      onEvent: (event) => {
        if (event.type === "tool:end") artifacts.push(event.step.artifact);
      },
    }).run("Quote ETH");
    expect(run.steps[0]).toMatchObject({ result: "3000", artifact: receipt });
    expect(artifacts).toEqual([receipt]);
  });

  it("tells the model about a tool it invented instead of failing the run", async () => {
    const seen: string[] = [];
    server = await startOpenAiServer({
      offeredToolsOnly: false,
      script: ({ turn, toolResults }) => {
        if (turn === 1) return { toolCalls: [{ name: "translate", arguments: { text: "Hallo" } }] };
        seen.push(toolResults[0]!.content);
        return { content: "I cannot translate with the tools I have." };
      },
    });
    const model = new ChatOpenAI({
      apiKey: "test",
      maxRetries: 0,
      configuration: { baseURL: server.baseURL },
    });
    const run = await createOrchestrator({ tools: [capabilityTool(languageDetector)], model }).run(
      "Translate Hallo",
    );
    expect(seen).toEqual(['Error: NotFound: there is no tool named "translate"']);
    expect(run.steps).toEqual([
      {
        index: 0,
        callId: "call_1_1",
        tool: "translate",
        args: { text: "Hallo" },
        result: 'Error: NotFound: there is no tool named "translate"',
        error: 'NotFound: there is no tool named "translate"',
      },
    ]);
    expect(run.answer).toBe("I cannot translate with the tools I have.");
  });

  it("sends the API's 400 for a conversation that leaves a tool call unanswered", async () => {
    server = await startOpenAiServer({ script: () => ({ content: "never" }) });
    const response = await fetch(`${server.baseURL}/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer test", "content-type": "application/json" },
      body: JSON.stringify({
        model: "m",
        messages: [
          { role: "user", content: "hi" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c1", type: "function", function: { name: "x", arguments: "{}" } }],
          },
          { role: "user", content: "and?" },
        ],
      }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(/c1/);
  });

  it("stops after maxTurns when the model never answers", async () => {
    server = await startOpenAiServer({
      script: () => ({ toolCalls: [{ name: "detect-language", arguments: { text: "Hallo Welt" } }] }),
    });
    const model = new ChatOpenAI({
      apiKey: "test",
      maxRetries: 0,
      configuration: { baseURL: server.baseURL },
    });
    const run = await createOrchestrator({
      tools: [capabilityTool(languageDetector)],
      model,
      maxTurns: 3,
    }).run("Loop");
    expect(run.steps).toHaveLength(3);
    expect(run.answer).toBe("Stopped after 3 model turns without a final answer.");
  });

  it("modelFromEnv gives a ChatOpenAI that honours OPENAI_BASE_URL and OPENAI_MODEL", async () => {
    server = await startOpenAiServer({ apiKey: "sk-local", script: researchScript });
    const model = modelFromEnv({
      OPENAI_API_KEY: "sk-local",
      OPENAI_BASE_URL: server.baseURL,
      OPENAI_MODEL: "local-model",
    });
    expect(model).not.toBe("rules");
    const documents = (await loadDocuments()).slice(0, 1);
    const run = await createOrchestrator({ tools: localTools(), model }).run("Summarize", { documents });
    expect(run.planner).toBe("local-model");
    expect(server.requests[0]!.model).toBe("local-model");
    expect(run.steps.map((step) => step.tool)).toEqual(["summarize", "detect-language"]);
  });

  it("surfaces the API's refusal of a wrong key", async () => {
    server = await startOpenAiServer({ apiKey: "right", script: () => ({ content: "never" }) });
    const model = new ChatOpenAI({
      apiKey: "wrong",
      maxRetries: 0,
      configuration: { baseURL: server.baseURL },
    });
    await expect(createOrchestrator({ tools: localTools(), model }).run("Hi")).rejects.toThrow(/API key/);
    expect(server.requests).toHaveLength(0);
  });
});
