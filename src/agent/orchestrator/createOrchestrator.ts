import type { BaseChatModel } from "@langchain/core/language_models/chat_models";
import {
  type AIMessage,
  type AIMessageChunk,
  type BaseMessage,
  HumanMessage,
  SystemMessage,
} from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { createRulePlanner, type Plan, type RulePlanner } from "../planner/createRulePlanner.ts";
import { type PlannerInputs, PlannerInputsSchema } from "../planner/plannerInputs.ts";
import { contentText, type OrchestratorStep, runToolCall } from "./runToolCall.ts";

export type { OrchestratorStep } from "./runToolCall.ts";

/** What happens during a run, in order; the spend report and progress displays are built from these. */
export type OrchestratorEvent =
  | { type: "plan"; planner: "rules"; plan: Plan }
  | { type: "model"; planner: string; turn: number; toolCalls: number }
  | {
      type: "tool:start";
      index: number;
      callId: string;
      tool: string;
      args: Record<string, unknown>;
      document?: string | undefined;
    }
  | { type: "tool:end"; step: OrchestratorStep }
  | { type: "answer"; planner: string; answer: string };

/** The narrow logger the orchestrator writes to; a pino logger satisfies it. */
export type OrchestratorLogger = {
  info(object: object, message?: string): void;
  warn(object: object, message?: string): void;
};

export type CreateOrchestratorOptions = {
  tools: readonly StructuredToolInterface[];
  /** A tool-calling chat model (e.g. `ChatOpenAI`), or `"rules"` (the default) for the rule planner. */
  model?: BaseChatModel | "rules" | undefined;
  logger?: OrchestratorLogger | undefined;
  /** Awaited for each event; a hook that throws ends the run with its error. */
  onEvent?: ((event: OrchestratorEvent) => void | Promise<void>) | undefined;
  /** Most model turns before a run stops without a final answer (default 8). */
  maxTurns?: number | undefined;
  /** The model's system prompt (default: `defaultSystemPrompt`). */
  systemPrompt?: string | undefined;
  /** The rule planner to use (default: `createRulePlanner()`). */
  planner?: RulePlanner | undefined;
};

export type OrchestratorRun = {
  answer: string;
  steps: OrchestratorStep[];
  /** `"rules"` for the rule planner, otherwise the model's name. */
  planner: string;
  /** The rule planner's plan, on the rules path. */
  plan?: Plan | undefined;
};

export type Orchestrator = {
  /** `"rules"` or the model's name. */
  readonly planner: string;
  run(
    task: string,
    inputs?: PlannerInputs,
    options?: { signal?: AbortSignal | undefined },
  ): Promise<OrchestratorRun>;
  /** Calls per tool the rule planner expects for a task: a forecast for the subscribe-or-pay policy. */
  forecast(task: string, inputs?: PlannerInputs): Record<string, number>;
};

export const defaultSystemPrompt = [
  "You are the orchestrator of a Tollgate agent. Complete the user's task with the tools offered.",
  "Tools may cost money: call a tool only when the task needs it, and do not repeat a call that succeeded.",
  "When a tool answers with an error code (for example BudgetExceeded or PaymentRequired), do not retry it blindly;",
  "finish with what you have and say what could not be done.",
  "Your final answer is plain text for the user.",
].join(" ");

const noopLogger: OrchestratorLogger = { info() {}, warn() {} };

/**
 * An agent that completes a task with tools: through a LangChain tool-calling chat model when one is
 * given, otherwise through the deterministic rule planner. Tool calls run one at a time, in order, so
 * that budgets and ledgers see a reproducible sequence.
 *
 * @example
 * const orchestrator = createOrchestrator({ tools, model: modelFromEnv(process.env) });
 * const { answer, steps, planner } = await orchestrator.run("Summarize each document", { documents });
 */
export function createOrchestrator(options: CreateOrchestratorOptions): Orchestrator {
  const tools = [...options.tools];
  const byName = new Map<string, StructuredToolInterface>();
  for (const tool of tools) {
    if (byName.has(tool.name)) {
      throw new TollgateError("InvalidRequest", `two tools are named ${JSON.stringify(tool.name)}`);
    }
    byName.set(tool.name, tool);
  }
  const model = options.model ?? "rules";
  const planner = options.planner ?? createRulePlanner();
  const logger = options.logger ?? noopLogger;
  const maxTurns = options.maxTurns ?? 8;
  if (!Number.isInteger(maxTurns) || maxTurns < 1) {
    throw new TollgateError("InvalidRequest", "maxTurns must be a positive integer");
  }
  if (model !== "rules" && typeof model.bindTools !== "function") {
    throw new TollgateError("InvalidRequest", "the model cannot call tools (it has no bindTools)");
  }
  const plannerName = model === "rules" ? "rules" : modelName(model);
  const emit = async (event: OrchestratorEvent) => {
    await options.onEvent?.(event);
  };

  async function callTool(
    steps: OrchestratorStep[],
    request: { callId: string; tool: string; args: Record<string, unknown>; document?: string | undefined },
    signal: AbortSignal | undefined,
  ) {
    signal?.throwIfAborted();
    const index = steps.length;
    await emit({ type: "tool:start", index, ...request });
    const outcome = await runToolCall(byName.get(request.tool), { index, ...request }, signal);
    steps.push(outcome.step);
    logger.info(
      { tool: request.tool, index, document: request.document, error: outcome.step.error },
      outcome.step.error === undefined ? "tool call done" : "tool call failed",
    );
    await emit({ type: "tool:end", step: outcome.step });
    return outcome;
  }

  async function runRules(task: string, inputs: PlannerInputs, signal: AbortSignal | undefined) {
    const plan = planner.plan(task, tools, inputs);
    logger.info({ planner: "rules", calls: plan.calls.length, forecast: plan.forecast }, "rule plan made");
    await emit({ type: "plan", planner: "rules", plan });
    const steps: OrchestratorStep[] = [];
    for (const call of plan.calls) {
      await callTool(
        steps,
        { callId: `rules_${steps.length + 1}`, tool: call.tool, args: call.args, document: call.document },
        signal,
      );
    }
    return { answer: planner.answer(plan, steps), steps, planner: "rules", plan };
  }

  async function runModel(
    chat: BaseChatModel,
    task: string,
    inputs: PlannerInputs,
    signal: AbortSignal | undefined,
  ) {
    // Checked at construction: a model without bindTools is refused.
    const bound = chat.bindTools!([...tools]);
    const messages: BaseMessage[] = [
      new SystemMessage(options.systemPrompt ?? defaultSystemPrompt),
      new HumanMessage(userMessage(task, inputs)),
    ];
    const steps: OrchestratorStep[] = [];
    for (let turn = 1; turn <= maxTurns; turn++) {
      const reply = await ask(chat, bound, messages, signal);
      messages.push(reply);
      const calls = reply.tool_calls ?? [];
      await emit({ type: "model", planner: plannerName, turn, toolCalls: calls.length });
      if (calls.length === 0) return { answer: contentText(reply.content), steps, planner: plannerName };
      for (const call of calls) {
        const outcome = await callTool(
          steps,
          { callId: call.id ?? `call_${steps.length + 1}`, tool: call.name, args: call.args ?? {} },
          signal,
        );
        messages.push(outcome.message);
      }
    }
    logger.warn({ planner: plannerName, maxTurns }, "model turns exhausted without a final answer");
    return {
      answer: `Stopped after ${maxTurns} model turns without a final answer.`,
      steps,
      planner: plannerName,
    };
  }

  return {
    planner: plannerName,
    async run(task, rawInputs = {}, runOptions = {}) {
      const inputs = parseWire(PlannerInputsSchema, rawInputs, { what: "task inputs" });
      const signal = runOptions.signal;
      const run: OrchestratorRun =
        model === "rules"
          ? await runRules(task, inputs, signal)
          : await runModel(model, task, inputs, signal);
      await emit({ type: "answer", planner: run.planner, answer: run.answer });
      return run;
    },
    forecast: (task, inputs = {}) => planner.forecast(task, tools, inputs),
  };
}

type BoundModel = ReturnType<NonNullable<BaseChatModel["bindTools"]>>;

/**
 * One model turn. A model configured to stream (`streaming: true`) is read through `stream()` and its
 * chunks joined: its `invoke()` would, after the stream, estimate token counts with a tokenizer that
 * LangChain downloads, which offline retries for minutes.
 */
async function ask(
  chat: BaseChatModel,
  bound: BoundModel,
  messages: BaseMessage[],
  signal: AbortSignal | undefined,
): Promise<AIMessage | AIMessageChunk> {
  const config = signal === undefined ? {} : { signal };
  if ((chat as { streaming?: unknown }).streaming !== true)
    return (await bound.invoke(messages, config)) as AIMessage;
  let joined: AIMessageChunk | undefined;
  for await (const chunk of await bound.stream(messages, config)) {
    const piece = chunk as AIMessageChunk;
    joined = joined === undefined ? piece : joined.concat(piece);
  }
  if (joined === undefined) throw new TollgateError("Internal", "the model's stream ended without a message");
  return joined;
}

/** The task, then its inputs as JSON for the model to read arguments from. */
function userMessage(task: string, inputs: PlannerInputs): string {
  if (Object.keys(inputs).length === 0) return task;
  return `${task}\n\nInputs (JSON):\n${JSON.stringify(inputs, null, 2)}`;
}

/** `model` of OpenAI-style chat models (`gpt-4o-mini`), else LangChain's class name. */
function modelName(model: BaseChatModel): string {
  const named = (model as { model?: unknown }).model;
  return typeof named === "string" && named !== "" ? named : model.getName();
}
