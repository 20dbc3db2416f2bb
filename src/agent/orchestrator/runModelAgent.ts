/**
 * The orchestrator's model path on LangChain's own agent (`createAgent`, docs/agents.md): the model,
 * the tools, Tollgate's middleware (budget check, spend approval, parallel calls through p-queue,
 * steps and events), a checkpointer so a run can pause for an approval and resume, and callbacks so a
 * user's tracing sees every call with its receipt. A streaming model's tokens go to `onToken` as they
 * arrive.
 */
import { randomUUID } from "node:crypto";
import { BaseCallbackHandler } from "@langchain/core/callbacks/base";
import type { Callbacks } from "@langchain/core/callbacks/manager";
import type { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, type BaseMessage, HumanMessage } from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { Command, MemorySaver } from "@langchain/langgraph";
import { createAgent, MiddlewareError } from "langchain";
import { TollgateError } from "../../protocol/errors.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import type { BudgetLedger } from "../budget/createBudgetLedger.ts";
import { MARKET_SEARCH_TOOL, type MarketToolFinder, marketSearchTool } from "./marketSearchTool.ts";
import type { OrchestratorEvent, OrchestratorLogger } from "./orchestratorEvent.ts";
import { contentText, type OrchestratorStep } from "./runToolCall.ts";
import type { SpendApprovalRequest, SpendApprover } from "./spendApproval.ts";
import {
  createTollgateMiddleware,
  type ModelRunState,
  type SpendApprovalInterrupt,
} from "./tollgateMiddleware.ts";
import type { ToolQueue } from "./toolQueue.ts";

export type ModelRunOptions = {
  chat: BaseChatModel;
  tools: readonly StructuredToolInterface[];
  systemPrompt: string;
  maxTurns: number;
  planner: string;
  queue: ToolQueue;
  emit: (event: OrchestratorEvent) => Promise<void>;
  logger: OrchestratorLogger;
  budget?: { ledger: BudgetLedger; agent: string } | undefined;
  approveAbove?: bigint | undefined;
  /** Answers spend-approval interrupts; without one every such call is refused. */
  approve?: SpendApprover | undefined;
  findTools?: MarketToolFinder | undefined;
  callbacks?: Callbacks | undefined;
  onToken?: ((text: string) => void) | undefined;
  /** The schemes paid tools' listings are read with (default: the built-ins). */
  schemes?: AgentSchemes | undefined;
};

/**
 * Makes a streaming model stream. LangChain reads a model through `stream` when a callback handler
 * prefers streaming; otherwise `invoke` on a streaming `ChatOpenAI` would, after the stream, estimate
 * token counts with a tokenizer it downloads, which offline is retried for minutes.
 */
class TokenHandler extends BaseCallbackHandler {
  name = "TollgateTokens";
  readonly lc_prefer_streaming = true;
  constructor(private readonly onToken: ((text: string) => void) | undefined) {
    super();
  }
  override handleLLMNewToken(token: string) {
    if (token !== "") this.onToken?.(token);
  }
}

/** The task, then its inputs as JSON for the model to read arguments from. */
export function userMessage(task: string, inputs: Record<string, unknown>): string {
  if (Object.keys(inputs).length === 0) return task;
  return `${task}\n\nInputs (JSON):\n${JSON.stringify(inputs, null, 2)}`;
}

function isSpendApproval(value: unknown): value is SpendApprovalInterrupt {
  return (
    typeof value === "object" &&
    value !== null &&
    (value as { type?: unknown }).type === "tollgate:spend-approval"
  );
}

export async function runModelAgent(
  options: ModelRunOptions,
  task: string,
  inputs: Record<string, unknown>,
  signal: AbortSignal | undefined,
): Promise<{ answer: string; steps: OrchestratorStep[]; planner: string }> {
  const state: ModelRunState = { steps: [], turns: 0, stopped: false, added: new Map() };
  const agent = createAgent({
    model: options.chat,
    tools: toolsOf(options, state),
    systemPrompt: options.systemPrompt,
    middleware: [
      createTollgateMiddleware({
        state,
        maxTurns: options.maxTurns,
        planner: options.planner,
        queue: options.queue,
        emit: options.emit,
        logger: options.logger,
        budget: options.budget,
        approveAbove: options.approveAbove,
        signal,
        schemes: options.schemes,
      }),
    ],
    checkpointer: new MemorySaver(),
  });
  const config = runConfig(options, signal);

  let input: unknown = { messages: [new HumanMessage(userMessage(task, inputs))] };
  let messages: BaseMessage[] = [];
  for (;;) {
    const result = (await agent.invoke(input as never, config as never).catch(unwrapTollgateError)) as {
      messages: BaseMessage[];
      __interrupt__?: { id?: string; value?: unknown }[];
    };
    messages = result.messages;
    const interrupts = result.__interrupt__ ?? [];
    if (interrupts.length === 0) break;
    input = new Command({ resume: await answerInterrupts(options, interrupts) });
  }
  return finalAnswer(options, state, messages);
}

/**
 * LangChain wraps what a model call throws through middleware in a `MiddlewareError`; a Tollgate
 * error inside (an unreachable model, a refusal) reaches the caller as itself, code and all.
 */
function unwrapTollgateError(error: unknown): never {
  throw error instanceof MiddlewareError && error.cause instanceof TollgateError ? error.cause : error;
}

/** The caller's tools, plus the market search tool when the run may find tools on the market. */
function toolsOf(options: ModelRunOptions, state: ModelRunState): StructuredToolInterface[] {
  const names = new Set(options.tools.map((t) => t.name));
  const tools = [...options.tools];
  if (options.findTools !== undefined) {
    if (names.has(MARKET_SEARCH_TOOL)) {
      throw new TollgateError("InvalidRequest", `a tool is already named ${MARKET_SEARCH_TOOL}`);
    }
    tools.push(marketSearchTool({ find: options.findTools, tools: state.added, has: (n) => names.has(n) }));
  }
  return tools;
}

/** The graph's run config: one thread per run, room for every turn, the callbacks and the signal. */
function runConfig(options: ModelRunOptions, signal: AbortSignal | undefined) {
  const streaming = (options.chat as { streaming?: unknown }).streaming === true;
  const handlers: Callbacks = [
    ...(Array.isArray(options.callbacks) ? options.callbacks : []),
    ...(streaming ? [new TokenHandler(options.onToken)] : []),
  ];
  if (options.callbacks !== undefined && !Array.isArray(options.callbacks)) {
    throw new TollgateError("InvalidRequest", "callbacks must be a list of callback handlers");
  }
  return {
    configurable: { thread_id: randomUUID() },
    // A turn is a few graph steps (model, tools, middleware hooks): room for every turn allowed.
    recursionLimit: options.maxTurns * 4 + 10,
    ...(handlers.length === 0 ? {} : { callbacks: handlers }),
    ...(signal === undefined ? {} : { signal }),
  };
}

/**
 * Answers the spend approvals the agent paused for, one after another: the approver's verdict, or a
 * refusal when there is none or it fails. Anything else the agent paused for is a fault.
 */
async function answerInterrupts(
  options: ModelRunOptions,
  interrupts: readonly { id?: string; value?: unknown }[],
): Promise<Record<string, { approved: boolean }>> {
  const resume: Record<string, { approved: boolean }> = {};
  for (const pending of interrupts) {
    if (pending.id === undefined || !isSpendApproval(pending.value)) {
      throw new TollgateError("Internal", "the agent paused for something other than a spend approval");
    }
    const asked = pending.value.request;
    const request: SpendApprovalRequest = {
      ...asked,
      maxAmount: BigInt(asked.maxAmount),
      threshold: BigInt(asked.threshold),
    };
    let approved = false;
    try {
      approved = options.approve === undefined ? false : (await options.approve(request)) === true;
    } catch (error) {
      options.logger.warn({ tool: request.tool, err: error }, "spend approval failed; refusing");
    }
    options.logger.info(
      { tool: request.tool, maxAmount: request.maxAmount.toString(), approved },
      approved ? "spend approved" : "spend not approved",
    );
    await options.emit({ type: "approval", request, approved });
    resume[pending.id] = { approved };
  }
  return resume;
}

/** The run's answer: the last AI message, or a note that the turns ran out. */
function finalAnswer(
  options: ModelRunOptions,
  state: ModelRunState,
  messages: readonly BaseMessage[],
): { answer: string; steps: OrchestratorStep[]; planner: string } {
  const steps = state.steps.filter((step) => step !== undefined);
  if (state.stopped) {
    options.logger.warn(
      { planner: options.planner, maxTurns: options.maxTurns },
      "model turns exhausted without a final answer",
    );
    return {
      answer: `Stopped after ${options.maxTurns} model turns without a final answer.`,
      steps,
      planner: options.planner,
    };
  }
  const last = [...messages].reverse().find((m) => AIMessage.isInstance(m));
  return { answer: last === undefined ? "" : contentText(last.content), steps, planner: options.planner };
}
