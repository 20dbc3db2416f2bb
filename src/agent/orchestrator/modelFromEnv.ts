import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { HttpUrlSchema } from "../../protocol/paymentRequired.ts";
import { failFastWhenUnreachable, type ModelTarget } from "./modelUnreachable.ts";

/** The model used when `OPENAI_MODEL` is not set. */
export const DEFAULT_OPENAI_MODEL = "gpt-4o-mini";

/** How long a model request may wait for its answer when `TOLLGATE_MODEL_TIMEOUT_MS` is not set. */
export const DEFAULT_MODEL_TIMEOUT_MS = 15_000;

/** Where the OpenAI client sends requests when `OPENAI_BASE_URL` is not set (for messages only). */
const OPENAI_API_URL = "https://api.openai.com/v1";

/** Empty variables count as unset, as shells and `.env` files often leave them. */
const optional = <T extends z.ZodType>(schema: T) =>
  z.preprocess((value) => (value === "" ? undefined : value), schema.optional());

export const ModelEnvSchema = z.object({
  OPENAI_API_KEY: optional(z.string().min(1)),
  /** Any OpenAI-compatible server, e.g. a local model server (`http://127.0.0.1:11434/v1`). */
  OPENAI_BASE_URL: optional(HttpUrlSchema),
  OPENAI_MODEL: optional(z.string().min(1).max(200)),
  /** `rules` forces the rule planner even with a key; `model` requires a key. */
  TOLLGATE_PLANNER: optional(z.enum(["rules", "model"])),
  /** How long one model request may wait for its answer before the run fails (default 15 s). */
  TOLLGATE_MODEL_TIMEOUT_MS: optional(z.coerce.number().int().positive()),
});
export type ModelEnv = z.infer<typeof ModelEnvSchema>;

export type ModelFromEnvOptions = {
  /** The `fetch` the OpenAI client uses (default: the global one). */
  fetch?: typeof fetch | undefined;
  /** Stream the model's replies, so its tokens can be shown as they arrive (`onToken`). */
  streaming?: boolean | undefined;
  /** Overrides `TOLLGATE_MODEL_TIMEOUT_MS` (e.g. from a command-line flag). */
  timeoutMs?: number | undefined;
  /** Where each model request and an unreachable model are logged, at debug level. */
  logger?: ModelLogger | undefined;
};

/** The narrow logger model requests are written to; a pino logger satisfies it. */
export type ModelLogger = { debug(object: object, message?: string): void };

/**
 * The orchestrator's model from the environment: a `ChatOpenAI` when `OPENAI_API_KEY` is set (with
 * `OPENAI_BASE_URL` and `OPENAI_MODEL` honoured), otherwise `"rules"`, the rule planner, so that
 * everything runs offline. For scripts and the CLI; library code takes the model as a parameter.
 * A request waits at most `TOLLGATE_MODEL_TIMEOUT_MS` (15 s); a model that refuses the connection or
 * does not answer in time ends the run at once with an error naming its URL, the model and the fixes.
 *
 * @example
 * const orchestrator = createOrchestrator({ tools, model: modelFromEnv(process.env) });
 */
export function modelFromEnv(
  env: Record<string, string | undefined>,
  options: ModelFromEnvOptions = {},
): ChatOpenAI | "rules" {
  const parsed = parseWire(ModelEnvSchema, env, { what: "model environment" });
  if (parsed.TOLLGATE_PLANNER === "rules") return "rules";
  if (parsed.OPENAI_API_KEY === undefined) {
    if (parsed.TOLLGATE_PLANNER === "model") {
      throw new TollgateError("InvalidRequest", "TOLLGATE_PLANNER=model needs OPENAI_API_KEY");
    }
    return "rules";
  }
  const target: ModelTarget = {
    model: parsed.OPENAI_MODEL ?? DEFAULT_OPENAI_MODEL,
    baseURL: parsed.OPENAI_BASE_URL ?? OPENAI_API_URL,
    timeoutMs: options.timeoutMs ?? parsed.TOLLGATE_MODEL_TIMEOUT_MS ?? DEFAULT_MODEL_TIMEOUT_MS,
  };
  const { logger } = options;
  return new ChatOpenAI({
    apiKey: parsed.OPENAI_API_KEY,
    model: target.model,
    timeout: target.timeoutMs,
    onFailedAttempt: failFastWhenUnreachable(target, (error) =>
      logger?.debug({ ...target, err: error }, "model unreachable"),
    ),
    ...(options.streaming === true ? { streaming: true } : {}),
    configuration: {
      ...(parsed.OPENAI_BASE_URL === undefined ? {} : { baseURL: parsed.OPENAI_BASE_URL }),
      ...(options.fetch === undefined && logger === undefined
        ? {}
        : { fetch: loggedFetch(options.fetch ?? globalThis.fetch, target, logger) }),
    },
  });
}

/** The client's `fetch`, logging each request (an attempt: LangChain may retry) at debug level. */
function loggedFetch(
  fetchFn: typeof fetch,
  target: ModelTarget,
  logger: ModelLogger | undefined,
): typeof fetch {
  if (logger === undefined) return fetchFn;
  return (input, init) => {
    logger.debug({ model: target.model, url: String(input), timeoutMs: target.timeoutMs }, "model request");
    return fetchFn(input, init);
  };
}
