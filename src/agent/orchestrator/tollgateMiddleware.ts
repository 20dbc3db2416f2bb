/**
 * Tollgate's middleware for LangChain's `createAgent` (docs/agents.md, the orchestrator): what a model run
 * does around every model call and tool call.
 *
 * - **Before a paid call** (a tool carrying `tollgate` metadata: its seller and listed prices): a call
 *   the budget cannot cover at the cheapest listed price is refused with `BudgetExceeded` before any
 *   request reaches the seller; a call whose largest listed price is above the agent's approval
 *   threshold pauses the run with a human-in-the-loop interrupt and goes on only with a yes.
 * - **Parallel calls**: LangChain runs each tool call of a turn as its own task; the middleware puts
 *   each through the run's `ToolQueue` (per-seller concurrency and rate limits). Identical calls of
 *   one turn (same tool, same arguments) are made once; the others share the result.
 * - **Steps and events**: each call becomes an `OrchestratorStep` at its position in the model's turn
 *   (whatever order calls finish in), with `tool:start` / `tool:end` events, and a paid call's receipt
 *   is dispatched as the custom callback event `tollgate_receipt` for a user's tracing.
 * - **Turns**: at most `maxTurns` model calls; tools found by the market search are offered to the
 *   model from the next turn on.
 *
 * Invariant: nothing in a call runs before the interrupt in it, so a run resumed after an approval
 * re-enters only calls that had not started; calls of the same turn that finished are not made again
 * (LangGraph keeps their results in the checkpoint).
 */
import { dispatchCustomEvent } from "@langchain/core/callbacks/dispatch";
import { type AIMessage, ToolMessage } from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { interrupt } from "@langchain/langgraph";
import { createMiddleware } from "langchain";
import { formatUnitsExact } from "../../protocol/amount.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { defaultAgentSchemes } from "../agentSchemes.ts";
import { availableFor } from "../budget/budgetHeadroom.ts";
import type { BudgetLedger } from "../budget/createBudgetLedger.ts";
import {
  describePricing,
  maxCallPrice,
  type PaidToolMetadata,
  paidToolMetadataOf,
} from "../tools/describePricing.ts";
import type { OrchestratorEvent, OrchestratorLogger } from "./orchestratorEvent.ts";
import { type OrchestratorStep, settleToolCall, type ToolCallRequest, toolNotFound } from "./runToolCall.ts";
import { type SpendApprovalRequest, withSpendGrant } from "./spendApproval.ts";
import type { ToolQueue } from "./toolQueue.ts";

/**
 * The value of a spend-approval interrupt (kept in the checkpoint, so JSON: amounts as decimal strings
 * of the smallest unit); the run resumes with `{ approved }`.
 */
export type SpendApprovalInterrupt = {
  type: "tollgate:spend-approval";
  request: Omit<SpendApprovalRequest, "maxAmount" | "threshold"> & { maxAmount: string; threshold: string };
};

type Outcome = { step: OrchestratorStep; message: ToolMessage };

export type ModelRunState = {
  steps: OrchestratorStep[];
  /** Model calls made so far. */
  turns: number;
  /** Set when `maxTurns` stopped the run. */
  stopped: boolean;
  /** Tools added during the run (by the market search), offered from the next turn on. */
  added: Map<string, StructuredToolInterface>;
};

export type TollgateMiddlewareOptions = {
  state: ModelRunState;
  maxTurns: number;
  planner: string;
  queue: ToolQueue;
  emit: (event: OrchestratorEvent) => Promise<void>;
  logger: OrchestratorLogger;
  /** The budget paid tools spend from: checked before a paid call is made. */
  budget?: { ledger: BudgetLedger; agent: string } | undefined;
  /** Spends above this (smallest unit) need approval through an interrupt. */
  approveAbove?: bigint | undefined;
  signal?: AbortSignal | undefined;
  /** The schemes paid tools' listings are read with (default: the built-ins). */
  schemes?: AgentSchemes | undefined;
};

/** Canonical JSON (keys sorted), so that `{a, b}` and `{b, a}` are the same call. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (typeof value === "object" && value !== null) {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

const usdc = (amount: bigint) => `${formatUnitsExact(amount)} USDC`;

/**
 * Why the budget cannot cover any listed way of paying for this call, or `undefined` when it can (or
 * the agent holds a subscription with the seller, which may cover the call at no further cost). A
 * snapshot: the ledger's atomic reserve stays the check that holds under concurrency.
 */
async function budgetRefusal(
  budget: { ledger: BudgetLedger; agent: string },
  meta: PaidToolMetadata,
  schemes: AgentSchemes,
): Promise<string | undefined> {
  const report = await budget.ledger.report(budget.agent);
  const seller = meta.seller.toLowerCase();
  if (report.subscriptions.active.some((s) => s.provider.toLowerCase() === seller)) return undefined;
  let best: { amount: bigint; room: bigint | undefined } | undefined;
  for (const entry of meta.pricing) {
    // How the budget would hold this entry's spend is its scheme's to say (per call, or a plan's period).
    const spend = schemes.listing(entry.type)?.spend(entry, meta.seller);
    if (spend === undefined) continue;
    const amount = BigInt(entry.amount);
    const room = availableFor(report, { provider: meta.seller, ...spend });
    if (room === undefined || amount <= room) return undefined;
    if (best === undefined || amount < best.amount) best = { amount, room };
  }
  if (best === undefined) return undefined;
  return `the budget of agent "${budget.agent}" has ${usdc(best.room ?? 0n)} left for this seller; the cheapest listed price is ${usdc(best.amount)} (nothing was paid)`;
}

/**
 * What the middleware remembers over one run: each tool call's position in the run, assigned in the
 * order the model made them, and the first call per (turn, tool, arguments), whose outcome identical
 * calls of that turn share.
 */
type MiddlewareRun = {
  options: TollgateMiddlewareOptions;
  positions: Map<string, number>;
  nextIndex: number;
  firstCalls: Map<string, Promise<Outcome>>;
};

type SpendGrant = { callId: string; upTo: bigint };

/** Keeps a call's step in the run's state, logs it and emits `tool:end`. */
async function recordOutcome(run: MiddlewareRun, outcome: Outcome): Promise<void> {
  const { state, logger, emit } = run.options;
  state.steps[outcome.step.index] = outcome.step;
  logger.info(
    { tool: outcome.step.tool, index: outcome.step.index, error: outcome.step.error },
    outcome.step.error === undefined ? "tool call done" : "tool call failed",
  );
  await emit({ type: "tool:end", step: outcome.step });
}

function emitStart(run: MiddlewareRun, target: ToolCallRequest): Promise<void> {
  const { index, callId, tool, args } = target;
  return run.options.emit({ type: "tool:start", index, callId, tool, args });
}

/**
 * Approval comes first and per call: nothing has run yet when the interrupt pauses the run. Resolves
 * with the grant a call over `approveAbove` was given (none when no approval is needed), or with the
 * refused call's message once recorded.
 */
async function approvalOf(
  run: MiddlewareRun,
  target: ToolCallRequest,
  meta: PaidToolMetadata | undefined,
): Promise<{ grant: SpendGrant | undefined } | { denied: ToolMessage }> {
  const { options } = run;
  if (meta === undefined || options.approveAbove === undefined) return { grant: undefined };
  const maxAmount = maxCallPrice(meta.pricing);
  if (maxAmount <= options.approveAbove) return { grant: undefined };
  const question: SpendApprovalInterrupt = {
    type: "tollgate:spend-approval",
    request: {
      agent: options.budget?.agent,
      tool: target.tool,
      callId: target.callId,
      args: target.args,
      seller: meta.seller,
      maxAmount: maxAmount.toString(),
      price: describePricing(meta.pricing, options.schemes),
      threshold: options.approveAbove.toString(),
    },
  };
  const answer = interrupt(question) as { approved?: unknown } | undefined;
  if (answer?.approved === true) return { grant: { callId: target.callId, upTo: maxAmount } };
  await emitStart(run, target);
  const outcome = refusedOutcome(
    target,
    `ApprovalDenied: spending up to ${usdc(maxAmount)} on ${target.tool} was not approved (nothing was paid)`,
  );
  await recordOutcome(run, outcome);
  return { denied: outcome.message };
}

/** An identical call of the turn: it shares the first one's result (its receipt stays with it). */
async function sharedCall(run: MiddlewareRun, target: ToolCallRequest, first: Promise<Outcome>) {
  await emitStart(run, target);
  const shared = await first;
  const outcome: Outcome = {
    step: {
      ...shared.step,
      index: target.index,
      callId: target.callId,
      artifact: undefined,
      duplicateOf: shared.step.callId,
    },
    message: new ToolMessage({
      content: shared.message.content,
      tool_call_id: target.callId,
      name: target.tool,
      ...(shared.message.status === "error" ? { status: "error" as const } : {}),
    }),
  };
  if (outcome.step.artifact === undefined) delete outcome.step.artifact;
  await recordOutcome(run, outcome);
  return outcome.message;
}

/** The call itself: refused when the budget cannot take it, else made in its seller's queue and settled. */
async function makeCall(
  run: MiddlewareRun,
  target: ToolCallRequest,
  meta: PaidToolMetadata | undefined,
  grant: SpendGrant | undefined,
  invoke: () => Promise<unknown>,
): Promise<Outcome> {
  const { options } = run;
  await emitStart(run, target);
  if (meta !== undefined && options.budget !== undefined) {
    const refusal = await budgetRefusal(options.budget, meta, options.schemes ?? defaultAgentSchemes);
    if (refusal !== undefined) return refusedOutcome(target, `BudgetExceeded: ${refusal}`);
  }
  return options.queue.run(
    meta?.seller ?? target.tool,
    () =>
      settleToolCall(
        target,
        grant === undefined ? invoke : () => withSpendGrant(grant, invoke),
        options.signal,
      ),
    options.signal,
  );
}

/** A tool call's way through the middleware: not found, approval, shared with an identical call, or made. */
async function runToolCall(
  run: MiddlewareRun,
  target: ToolCallRequest,
  tool: StructuredToolInterface | undefined,
  invoke: (tool: StructuredToolInterface) => Promise<unknown>,
): Promise<ToolMessage> {
  if (tool === undefined) {
    const outcome = toolNotFound(target);
    await emitStart(run, target);
    await recordOutcome(run, outcome);
    return outcome.message;
  }
  const meta = paidToolMetadataOf(tool as { metadata?: Record<string, unknown> });
  const approval = await approvalOf(run, target, meta);
  if ("denied" in approval) return approval.denied;

  const key = `${run.options.state.turns}\u0000${target.tool}\u0000${canonical(target.args)}`;
  const first = run.firstCalls.get(key);
  if (first !== undefined) return sharedCall(run, target, first);

  // Registered before anything is awaited, so an identical call of the same turn finds it.
  const made = makeCall(run, target, meta, approval.grant, () => invoke(tool));
  run.firstCalls.set(key, made);
  const outcome = await made;
  if (outcome.step.artifact !== undefined && meta !== undefined) {
    await dispatchCustomEvent("tollgate_receipt", {
      tool: target.tool,
      callId: target.callId,
      seller: meta.seller,
      receipt: outcome.step.artifact,
    }).catch(() => undefined);
  }
  await recordOutcome(run, outcome);
  return outcome.message;
}

export function createTollgateMiddleware(options: TollgateMiddlewareOptions) {
  const { state, emit } = options;
  const run: MiddlewareRun = { options, positions: new Map(), nextIndex: 0, firstCalls: new Map() };
  return createMiddleware({
    name: "TollgateMiddleware",
    beforeModel: {
      canJumpTo: ["end"],
      hook: () => {
        if (state.turns < options.maxTurns) return undefined;
        state.stopped = true;
        return { jumpTo: "end" };
      },
    },
    wrapModelCall: async (request, handler) => {
      const tools = state.added.size === 0 ? request.tools : [...request.tools, ...state.added.values()];
      const reply = (await handler({ ...request, tools })) as AIMessage;
      state.turns += 1;
      const calls = reply.tool_calls ?? [];
      for (const call of calls) run.positions.set(call.id ?? "", run.nextIndex++);
      await emit({ type: "model", planner: options.planner, turn: state.turns, toolCalls: calls.length });
      return reply;
    },
    wrapToolCall: async (request, handler) => {
      const call = request.toolCall;
      const callId = call.id ?? `call_${run.nextIndex + 1}`;
      const index = run.positions.get(callId) ?? run.nextIndex++;
      const args = (call.args ?? {}) as Record<string, unknown>;
      const target: ToolCallRequest = { index, callId, tool: call.name, args };
      const tool = (request.tool as StructuredToolInterface | undefined) ?? state.added.get(call.name);
      return runToolCall(run, target, tool, (t) => handler({ ...request, tool: t }) as Promise<unknown>);
    },
  });
}

/** A call refused before it was made: the step and the error message the model reads. */
function refusedOutcome(target: ToolCallRequest, error: string): Outcome {
  return {
    step: {
      index: target.index,
      callId: target.callId,
      tool: target.tool,
      args: target.args,
      result: `Error: ${error}`,
      error,
    },
    message: new ToolMessage({
      content: `Error: ${error}`,
      tool_call_id: target.callId,
      name: target.tool,
      status: "error",
    }),
  };
}
