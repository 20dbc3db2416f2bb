import type { Callbacks } from "@langchain/core/callbacks/manager";
import type { BaseChatModel } from "@langchain/core/language_models/chat_models";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import type { Scheme } from "../../schemes/types.ts";
import { agentSchemesWith } from "../agentSchemes.ts";
import type { BudgetLedger } from "../budget/createBudgetLedger.ts";
import { createRulePlanner, type RulePlanner } from "../planner/createRulePlanner.ts";
import type { Plan } from "../planner/plan.ts";
import { type PlannerInputs, PlannerInputsSchema } from "../planner/plannerInputs.ts";
import { runPlanCalls } from "../planner/runPlanCalls.ts";
import { paidToolMetadataOf } from "../tools/describePricing.ts";
import type { MarketToolFinder } from "./marketSearchTool.ts";
import type { OrchestratorEvent, OrchestratorLogger } from "./orchestratorEvent.ts";
import { runModelAgent } from "./runModelAgent.ts";
import { type OrchestratorStep, runToolCall } from "./runToolCall.ts";
import type { SpendApprover } from "./spendApproval.ts";
import { createToolQueue, type ToolQueue, type ToolQueueOptions } from "./toolQueue.ts";

export type { OrchestratorStep } from "./runToolCall.ts";

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
  /**
   * The budget the paid tools spend from (model path): a paid call it cannot cover at the cheapest
   * listed price is refused before any request is made.
   */
  budget?: { ledger: BudgetLedger; agent: string } | undefined;
  /**
   * Paid calls whose largest listed price is above this (smallest unit) pause the run for `approve`
   * (a human-in-the-loop interrupt on the model path). Usually the agent's stored threshold.
   */
  approveAbove?: bigint | undefined;
  /** Answers spend-approval questions; without it every call above `approveAbove` is refused. */
  approve?: SpendApprover | undefined;
  /** How the calls of one model turn run at once: a queue, or its limits (`createToolQueue`). */
  queue?: ToolQueue | ToolQueueOptions | undefined;
  /** Offers the model the market search tool (`search_market`), which adds found tools to the run. */
  findTools?: MarketToolFinder | undefined;
  /** LangChain callbacks for the model path: a user's tracing sees every call with its receipt. */
  callbacks?: Callbacks | undefined;
  /** Each token of a streaming model's replies, as it arrives. */
  onToken?: ((text: string) => void) | undefined;
  /**
   * The agent's prepaid channels (the ones its paid tools pay through). At the end of every run the
   * idle rule closes those unused for `channelIdleSeconds` (default 600): channels this run used stay
   * open for the runs that follow, channels no run used lately are closed and their holds released
   * (docs/channels.md, "Agents"). A one-shot process closes them all itself (`tollgate run` does).
   */
  channels?: IdleChannels | undefined;
  channelIdleSeconds?: number | undefined;
  /**
   * Schemes beyond the built-ins that the paid tools' listings may price in (`[toy]`): pass the
   * tools' own (`paidTool({ schemes })`), so the orchestrator reads their listings as they do.
   */
  schemes?: readonly Scheme[] | undefined;
};

/** What the orchestrator asks of the agent's prepaid channels (`createAgentChannels` gives it). */
export type IdleChannels = {
  /** Closes the channels unused for `idleSeconds` and releases their holds; resolves those closed. */
  closeIdle(options?: {
    idleSeconds?: number | undefined;
  }): Promise<readonly { channelId: string; spent: bigint; returned: bigint }[]>;
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

/** What an orchestrator's runs share, checked and chosen once from its options. */
type OrchestratorParts = {
  options: CreateOrchestratorOptions;
  tools: StructuredToolInterface[];
  byName: Map<string, StructuredToolInterface>;
  model: BaseChatModel | "rules";
  planner: RulePlanner;
  logger: OrchestratorLogger;
  maxTurns: number;
  plannerName: string;
  schemes: ReturnType<typeof agentSchemesWith>;
  emit: (event: OrchestratorEvent) => Promise<void>;
  queue: ToolQueue;
};

function orchestratorParts(options: CreateOrchestratorOptions): OrchestratorParts {
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
  const schemes = agentSchemesWith(options.schemes);
  const emit = async (event: OrchestratorEvent) => {
    await options.onEvent?.(event);
  };
  const queue =
    options.queue !== undefined && "run" in options.queue
      ? options.queue
      : createToolQueue(options.queue as ToolQueueOptions | undefined);
  return { options, tools, byName, model, planner, logger, maxTurns, plannerName, schemes, emit, queue };
}

/** The listed metadata of the tool named `name`, when it is a paid tool. */
function metadataOf(parts: OrchestratorParts, name: string) {
  return paidToolMetadataOf(parts.byName.get(name) as { metadata?: Record<string, unknown> } | undefined);
}

/** A run by the rule planner: its plan's calls, independent, run at once through the queue (runPlanCalls.ts). */
async function runRules(
  parts: OrchestratorParts,
  task: string,
  inputs: PlannerInputs,
  signal: AbortSignal | undefined,
): Promise<OrchestratorRun> {
  const { planner, logger, emit, byName } = parts;
  const plan = planner.plan(task, parts.tools, inputs);
  logger.info({ planner: "rules", calls: plan.calls.length, forecast: plan.forecast }, "rule plan made");
  await emit({ type: "plan", planner: "rules", plan });
  const steps = await runPlanCalls<OrchestratorStep>(plan.calls, {
    queue: parts.queue,
    // A tool whose listing offers a way of paying that commits beyond the call (a plan, a
    // channel's deposit) may take it: its first call leads alone.
    leadsAlone: (name) =>
      metadataOf(parts, name)?.pricing.some((p) => parts.schemes.listing(p.type)?.commits ?? true) === true,
    sellerOf: (name) => metadataOf(parts, name)?.seller ?? name,
    call: async ({ index, ...request }) => {
      signal?.throwIfAborted();
      await emit({ type: "tool:start", index, ...request });
      const outcome = await runToolCall(byName.get(request.tool), { index, ...request }, signal);
      logger.info(
        { tool: request.tool, index, document: request.document, error: outcome.step.error },
        outcome.step.error === undefined ? "tool call done" : "tool call failed",
      );
      await emit({ type: "tool:end", step: outcome.step });
      return outcome.step;
    },
    duplicate: async ({ index, ...request }, first, shared) => {
      await emit({ type: "tool:start", index, ...request });
      // Made once: this call shares the first one's result (its receipt stays with it).
      const { artifact: _receipt, ...rest } = shared;
      const step: OrchestratorStep = { ...rest, index, callId: request.callId, duplicateOf: first.callId };
      await emit({ type: "tool:end", step });
      return step;
    },
    signal,
  });
  return { answer: planner.answer(plan, steps), steps, planner: "rules", plan };
}

/** A run by a tool-calling chat model, through LangChain's agent and Tollgate's middleware. */
function runModel(
  parts: OrchestratorParts,
  chat: BaseChatModel,
  task: string,
  inputs: PlannerInputs,
  signal: AbortSignal | undefined,
) {
  const { options } = parts;
  return runModelAgent(
    {
      chat,
      tools: parts.tools,
      systemPrompt: options.systemPrompt ?? defaultSystemPrompt,
      maxTurns: parts.maxTurns,
      planner: parts.plannerName,
      queue: parts.queue,
      emit: parts.emit,
      logger: parts.logger,
      budget: options.budget,
      approveAbove: options.approveAbove,
      approve: options.approve,
      schemes: parts.schemes,
      findTools: options.findTools,
      callbacks: options.callbacks,
      onToken: options.onToken,
    },
    task,
    inputs,
    signal,
  );
}

/** Closes the channels idle at the end of a run; a failure is logged and changes nothing else. */
async function closeIdleChannels(parts: OrchestratorParts): Promise<void> {
  const { options, logger } = parts;
  if (options.channels === undefined) return;
  try {
    const closed = await options.channels.closeIdle({ idleSeconds: options.channelIdleSeconds });
    for (const c of closed) {
      logger.info(
        { channelId: c.channelId, spent: c.spent.toString(), returned: c.returned.toString() },
        "idle channel closed at the end of the run",
      );
    }
  } catch (error) {
    logger.warn({ err: error }, "could not close idle channels at the end of the run");
  }
}

/**
 * An agent that completes a task with tools: through LangChain's `createAgent` over a tool-calling
 * chat model when one is given (Tollgate's middleware checks the budget, asks for approval and runs a
 * turn's calls in parallel through p-queue; see tollgateMiddleware.ts), otherwise through the
 * deterministic rule planner, whose independent calls run at once through the same queue (the answer
 * lists them in the plan's order; identical calls are made once).
 *
 * @example
 * const orchestrator = createOrchestrator({ tools, model: modelFromEnv(process.env) });
 * const { answer, steps, planner } = await orchestrator.run("Summarize each document", { documents });
 */
export function createOrchestrator(options: CreateOrchestratorOptions): Orchestrator {
  const parts = orchestratorParts(options);
  const { model } = parts;
  return {
    planner: parts.plannerName,
    async run(task, rawInputs = {}, runOptions = {}) {
      const inputs = parseWire(PlannerInputsSchema, rawInputs, { what: "task inputs" });
      const signal = runOptions.signal;
      const run: OrchestratorRun =
        model === "rules"
          ? await runRules(parts, task, inputs, signal)
          : await runModel(parts, model, task, inputs, signal);
      await parts.emit({ type: "answer", planner: run.planner, answer: run.answer });
      await closeIdleChannels(parts);
      return run;
    },
    forecast: (task, inputs = {}) => parts.planner.forecast(task, parts.tools, inputs),
  };
}

/** `model` of OpenAI-style chat models (`gpt-4o-mini`), else LangChain's class name. */
function modelName(model: BaseChatModel): string {
  const named = (model as { model?: unknown }).model;
  return typeof named === "string" && named !== "" ? named : model.getName();
}
