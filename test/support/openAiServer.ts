/**
 * A local server speaking OpenAI's chat-completions wire protocol, standing in for the LLM API (which
 * tests cannot reach). It answers `POST /v1/chat/completions` — plain JSON, or server-sent events when
 * the request streams — with replies a test scripts from the tools offered and the conversation so far.
 * Like the real API it rejects a missing key (401) and a malformed conversation (400): a tool message
 * that answers no pending tool call, or an assistant tool call left unanswered.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";

const TextContentSchema = z.union([
  z.string(),
  z.array(z.looseObject({ type: z.string(), text: z.string().optional() })),
]);

const ToolCallSchema = z.object({
  id: z.string().min(1),
  type: z.literal("function"),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

export const ChatMessageSchema = z.discriminatedUnion("role", [
  z.looseObject({ role: z.literal("system"), content: TextContentSchema }),
  z.looseObject({ role: z.literal("developer"), content: TextContentSchema }),
  z.looseObject({ role: z.literal("user"), content: TextContentSchema }),
  z.looseObject({
    role: z.literal("assistant"),
    content: TextContentSchema.nullable().optional(),
    tool_calls: z.array(ToolCallSchema).optional(),
  }),
  z.looseObject({ role: z.literal("tool"), tool_call_id: z.string().min(1), content: TextContentSchema }),
]);
export type ChatMessage = z.infer<typeof ChatMessageSchema>;

export const ChatRequestSchema = z.looseObject({
  model: z.string().min(1),
  messages: z.array(ChatMessageSchema).min(1),
  tools: z
    .array(
      z.object({
        type: z.literal("function"),
        function: z.looseObject({
          name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/),
          description: z.string().optional(),
          parameters: z.record(z.string(), z.unknown()).optional(),
        }),
      }),
    )
    .optional(),
  stream: z.boolean().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
});
export type ChatRequest = z.infer<typeof ChatRequestSchema>;

/** A tool result in the conversation, with the name of the tool call it answers. */
export type ToolResult = { id: string; name: string; arguments: unknown; content: string };

export type ScriptedReply =
  | { content: string }
  | { toolCalls: { name: string; arguments: Record<string, unknown> }[]; content?: string };

export type ScriptContext = {
  /** 1 for the first model call of a conversation, 2 after one round of tool results, … */
  turn: number;
  /** Names of the tools the request offers. */
  tools: string[];
  /** The latest user message's text. */
  userText: string;
  /** Every tool result so far, in order. */
  toolResults: ToolResult[];
};

export type ChatScript = (context: ScriptContext, request: ChatRequest) => ScriptedReply;

export type OpenAiServer = {
  /** What to pass as `configuration.baseURL` (ends in `/v1`). */
  baseURL: string;
  /** Every well-formed request received, in order. */
  requests: ChatRequest[];
  close(): Promise<void>;
};

function text(content: z.infer<typeof TextContentSchema> | null | undefined): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  return content.map((part) => part.text ?? "").join("");
}

/** The conversation rules the real API enforces, as the 400 message it would send, or undefined. */
function conversationProblem(messages: ChatMessage[]): string | undefined {
  let pending: Set<string> | undefined;
  for (const [index, message] of messages.entries()) {
    if (message.role === "tool") {
      if (pending === undefined || !pending.delete(message.tool_call_id)) {
        return `messages[${index}]: a message with role 'tool' must be a response to a preceding message with 'tool_calls'`;
      }
      continue;
    }
    if (pending !== undefined && pending.size > 0) {
      return `an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (missing: ${[...pending].join(", ")})`;
    }
    pending =
      message.role === "assistant" && message.tool_calls !== undefined
        ? new Set(message.tool_calls.map((call) => call.id))
        : undefined;
  }
  if (pending !== undefined && pending.size > 0) return "the conversation ends with unanswered tool calls";
  return undefined;
}

function scriptContext(request: ChatRequest): ScriptContext {
  const calls = new Map<string, { name: string; arguments: unknown }>();
  const toolResults: ToolResult[] = [];
  let userText = "";
  let turn = 1;
  for (const message of request.messages) {
    if (message.role === "user") userText = text(message.content);
    if (message.role === "assistant") {
      turn += 1;
      for (const call of message.tool_calls ?? []) {
        calls.set(call.id, { name: call.function.name, arguments: JSON.parse(call.function.arguments) });
      }
    }
    if (message.role === "tool") {
      const call = calls.get(message.tool_call_id);
      toolResults.push({
        id: message.tool_call_id,
        name: call?.name ?? "",
        arguments: call?.arguments,
        content: text(message.content),
      });
    }
  }
  return { turn, tools: (request.tools ?? []).map((tool) => tool.function.name), userText, toolResults };
}

function sendError(response: ServerResponse, status: number, message: string, code: string | null = null) {
  response.writeHead(status, { "content-type": "application/json" });
  response.end(JSON.stringify({ error: { message, type: "invalid_request_error", param: null, code } }));
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * Starts the server on a free loopback port.
 *
 * @example
 * const server = await startOpenAiServer({ apiKey: "test", script: ({ turn }) => turn === 1
 *   ? { toolCalls: [{ name: "summarize", arguments: { text: "…" } }] } : { content: "done" } });
 * const model = new ChatOpenAI({ apiKey: "test", configuration: { baseURL: server.baseURL } });
 */
export async function startOpenAiServer(options: {
  script: ChatScript;
  apiKey?: string;
  /**
   * Refuse (500) a scripted call of a tool the request does not offer, which catches script mistakes;
   * default true. Turn off to act as a model that invents a tool name.
   */
  offeredToolsOnly?: boolean;
}): Promise<OpenAiServer> {
  const apiKey = options.apiKey ?? "test";
  const requests: ChatRequest[] = [];
  let completions = 0;

  const server = createServer((request, response) => {
    void (async () => {
      if (request.method !== "POST" || request.url?.split("?")[0] !== "/v1/chat/completions") {
        return sendError(
          response,
          404,
          `Unknown request URL: ${request.method} ${request.url}`,
          "unknown_url",
        );
      }
      if (request.headers.authorization !== `Bearer ${apiKey}`) {
        return sendError(response, 401, "Incorrect API key provided.", "invalid_api_key");
      }
      let body: unknown;
      try {
        body = JSON.parse(await readBody(request));
      } catch {
        return sendError(response, 400, "We could not parse the JSON body of your request.");
      }
      const parsed = ChatRequestSchema.safeParse(body);
      if (!parsed.success) return sendError(response, 400, `Invalid request: ${parsed.error.message}`);
      const chat = parsed.data;
      const problem = conversationProblem(chat.messages);
      if (problem !== undefined) return sendError(response, 400, problem);
      requests.push(chat);

      const context = scriptContext(chat);
      const reply = options.script(context, chat);
      completions += 1;
      const id = `chatcmpl-${completions}`;
      const created = 1_700_000_000 + completions;
      const toolCalls =
        "toolCalls" in reply
          ? reply.toolCalls.map((call, index) => {
              if (options.offeredToolsOnly !== false && !context.tools.includes(call.name)) {
                throw new Error(`the script called ${call.name}, which the request does not offer`);
              }
              return {
                id: `call_${completions}_${index + 1}`,
                type: "function" as const,
                function: { name: call.name, arguments: JSON.stringify(call.arguments) },
              };
            })
          : [];
      const content = reply.content ?? null;
      const finishReason = toolCalls.length > 0 ? "tool_calls" : "stop";
      const promptTokens = Math.ceil(JSON.stringify(chat.messages).length / 4);
      const completionTokens = Math.ceil(JSON.stringify({ content, toolCalls }).length / 4);
      const usage = {
        prompt_tokens: promptTokens,
        completion_tokens: completionTokens,
        total_tokens: promptTokens + completionTokens,
      };

      if (chat.stream !== true) {
        response.writeHead(200, { "content-type": "application/json" });
        response.end(
          JSON.stringify({
            id,
            object: "chat.completion",
            created,
            model: chat.model,
            choices: [
              {
                index: 0,
                message: {
                  role: "assistant",
                  content,
                  ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
                  refusal: null,
                },
                logprobs: null,
                finish_reason: finishReason,
              },
            ],
            usage,
          }),
        );
        return;
      }

      // Streaming: the role first, then content in pieces, then each tool call's name and its
      // arguments in pieces, then the finish reason, usage when asked for, and [DONE].
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      const send = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        response.write(
          `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: chat.model, choices, ...extra })}\n\n`,
        );
      const delta = (value: Record<string, unknown>, finish: string | null = null) =>
        send([{ index: 0, delta: value, logprobs: null, finish_reason: finish }]);
      delta({ role: "assistant", content: "" });
      for (const piece of pieces(content ?? "", 7)) delta({ content: piece });
      toolCalls.forEach((call, index) => {
        delta({
          tool_calls: [
            { index, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } },
          ],
        });
        for (const piece of pieces(call.function.arguments, 11)) {
          delta({ tool_calls: [{ index, function: { arguments: piece } }] });
        }
      });
      delta({}, finishReason);
      if (chat.stream_options?.include_usage === true) send([], { usage });
      response.end("data: [DONE]\n\n");
    })().catch((error: unknown) => {
      if (!response.headersSent)
        sendError(response, 500, error instanceof Error ? error.message : String(error));
      else response.end();
    });
  });

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

function pieces(value: string, size: number): string[] {
  const result: string[] = [];
  for (let i = 0; i < value.length; i += size) result.push(value.slice(i, i + size));
  return result;
}
