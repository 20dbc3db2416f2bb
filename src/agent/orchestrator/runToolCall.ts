import { ToolMessage } from "@langchain/core/messages";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { isTollgateError } from "../../protocol/errors.ts";

/** One tool call of an orchestrator run and its outcome. */
export type OrchestratorStep = {
  /** Position in the run, from 0. */
  index: number;
  /** The tool-call id (the model's, or `rules_<n>` for the rule planner). */
  callId: string;
  tool: string;
  args: Record<string, unknown>;
  /** The tool's content as text (JSON text for capability tools); for a failure, the error text. */
  result: string;
  /** What the tool returned besides its content, e.g. a payment receipt. */
  artifact?: unknown;
  /** `"<code>: <message>"` when the call failed. */
  error?: string | undefined;
  /** The document the call worked on, when the rule planner fanned out. */
  document?: string | undefined;
  /**
   * Set when the model made the same call (same tool, same arguments) earlier in the same turn: this
   * step shares that call's result and was not paid again; the receipt stays on the first step.
   */
  duplicateOf?: string | undefined;
};

export type ToolCallRequest = {
  index: number;
  callId: string;
  tool: string;
  args: Record<string, unknown>;
  document?: string | undefined;
};

/**
 * Runs one tool call and returns its step and the `ToolMessage` a model sees next. Never throws for a
 * tool's failure (only for cancellation): a failure becomes a step with `error` and an error message
 * the model can act on. A tool reports a failure by throwing, by returning a `ToolMessage` with
 * status "error", with an artifact `{ error: { code, message } }`, or with content of the form
 * `ERROR <Code>: <message>` (how paid tools report a failed purchase to the model).
 */
export async function runToolCall(
  tool: StructuredToolInterface | undefined,
  request: ToolCallRequest,
  signal: AbortSignal | undefined,
): Promise<{ step: OrchestratorStep; message: ToolMessage }> {
  if (tool === undefined) return toolNotFound(request);
  return settleToolCall(
    request,
    () =>
      tool.invoke(
        { id: request.callId, name: request.tool, args: request.args, type: "tool_call" },
        signal === undefined ? {} : { signal },
      ),
    signal,
  );
}

function failedCall(request: ToolCallRequest, error: string, artifact?: unknown) {
  return {
    step: {
      ...stepBase(request),
      result: `Error: ${error}`,
      error,
      ...(artifact === undefined ? {} : { artifact }),
    },
    message: new ToolMessage({
      content: `Error: ${error}`,
      tool_call_id: request.callId,
      name: request.tool,
      status: "error",
    }),
  };
}

function stepBase(request: ToolCallRequest) {
  return {
    index: request.index,
    callId: request.callId,
    tool: request.tool,
    args: request.args,
    ...(request.document === undefined ? {} : { document: request.document }),
  };
}

/** The outcome of a call to a tool that does not exist (a name the model invented). */
export function toolNotFound(request: ToolCallRequest): { step: OrchestratorStep; message: ToolMessage } {
  return failedCall(request, `NotFound: there is no tool named ${JSON.stringify(request.tool)}`);
}

/**
 * Turns what running a tool gave (`invoke` resolves with the tool's output, or rejects) into the step
 * and the message a model sees. A paid call's receipt stays the artifact and is summarised after the
 * content, so the model knows what each call cost (see `summarizeReceipt`).
 */
export async function settleToolCall(
  request: ToolCallRequest,
  invoke: () => Promise<unknown>,
  signal: AbortSignal | undefined,
): Promise<{ step: OrchestratorStep; message: ToolMessage }> {
  let output: unknown;
  try {
    output = await invoke();
  } catch (error) {
    if (signal?.aborted === true) throw signal.reason ?? error;
    return failedCall(request, describeError(error));
  }
  const base = stepBase(request);
  if (!ToolMessage.isInstance(output)) {
    const result = contentText(output);
    return {
      step: { ...base, result },
      message: new ToolMessage({ content: result, tool_call_id: request.callId, name: request.tool }),
    };
  }
  const result = contentText(output.content);
  const error =
    output.status === "error" ? result : (errorOfArtifact(output.artifact) ?? errorOfText(result));
  if (error !== undefined) return failedCall(request, error, output.artifact);
  const summary = summarizeReceipt(output.artifact);
  return {
    step: { ...base, result, ...(output.artifact === undefined ? {} : { artifact: output.artifact }) },
    message:
      summary === undefined
        ? output
        : new ToolMessage({
            content: `${result}\n\n${summary}`,
            artifact: output.artifact,
            tool_call_id: request.callId,
            name: request.tool,
          }),
  };
}

/**
 * One line a model reads after a paid call's result: `Receipt: paid 0.02 USDC (one-time) to 0x…,
 * transaction 0x….` or `Receipt: covered by subscription 3, nothing more charged.` Only for a paid
 * tool's receipt (`{ tool, mode, amount }`); anything else gives `undefined`.
 */
export function summarizeReceipt(artifact: unknown): string | undefined {
  if (typeof artifact !== "object" || artifact === null) return undefined;
  const r = artifact as Partial<
    Record<"tool" | "mode" | "amount" | "provider" | "transaction" | "subscriptionId", unknown>
  >;
  if (typeof r.tool !== "string" || typeof r.mode !== "string" || typeof r.amount !== "string")
    return undefined;
  const free = /^0(\.0*)?$/.test(r.amount);
  if (free) {
    return typeof r.subscriptionId === "string"
      ? `Receipt: covered by subscription ${r.subscriptionId}, nothing more charged.`
      : "Receipt: nothing charged.";
  }
  const to = typeof r.provider === "string" ? ` to ${r.provider}` : "";
  const tx = typeof r.transaction === "string" ? `, transaction ${r.transaction}` : "";
  const plan = typeof r.subscriptionId === "string" ? `, subscription ${r.subscriptionId}` : "";
  return `Receipt: paid ${r.amount} USDC (${r.mode})${to}${tx}${plan}.`;
}

/** `"<code>: <message>"` for a Tollgate error, `"<name>: <message>"` otherwise. */
export function describeError(error: unknown): string {
  if (isTollgateError(error)) return `${error.code}: ${error.message}`;
  if (error instanceof Error) {
    if (error.name === "ToolInputParsingException") return `InvalidRequest: ${error.message}`;
    return `${error.name}: ${error.message}`;
  }
  return `Error: ${String(error)}`;
}

/** A tool's content as text: strings as they are, content blocks' text joined, anything else as JSON. */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    const texts = content.map((block) =>
      typeof block === "string"
        ? block
        : typeof block === "object" &&
            block !== null &&
            typeof (block as { text?: unknown }).text === "string"
          ? (block as { text: string }).text
          : JSON.stringify(block),
    );
    return texts.join("");
  }
  return JSON.stringify(content) ?? "";
}

/** `"<Code>: <message>"` of content `ERROR <Code>: <message>`. */
function errorOfText(text: string): string | undefined {
  const match = /^ERROR ([A-Za-z][A-Za-z0-9]*): ([\s\S]*)$/.exec(text);
  return match === null ? undefined : `${match[1]}: ${match[2]}`;
}

function errorOfArtifact(artifact: unknown): string | undefined {
  if (typeof artifact !== "object" || artifact === null) return undefined;
  const error = (artifact as { error?: unknown }).error;
  if (typeof error !== "object" || error === null) return undefined;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code !== "string") return undefined;
  return typeof message === "string" ? `${code}: ${message}` : code;
}
