import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { HttpUrlSchema } from "../../protocol/paymentRequired.ts";

/** The model used when `OPENAI_MODEL` is not set. */
export const DEFAULT_OPENAI_MODEL = "gpt-4o-mini";

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
});
export type ModelEnv = z.infer<typeof ModelEnvSchema>;

export type ModelFromEnvOptions = {
  /** The `fetch` the OpenAI client uses (default: the global one). */
  fetch?: typeof fetch | undefined;
  /** Stream the model's replies, so its tokens can be shown as they arrive (`onToken`). */
  streaming?: boolean | undefined;
};

/**
 * The orchestrator's model from the environment: a `ChatOpenAI` when `OPENAI_API_KEY` is set (with
 * `OPENAI_BASE_URL` and `OPENAI_MODEL` honoured), otherwise `"rules"`, the rule planner, so that
 * everything runs offline. For scripts and the CLI; library code takes the model as a parameter.
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
  return new ChatOpenAI({
    apiKey: parsed.OPENAI_API_KEY,
    model: parsed.OPENAI_MODEL ?? DEFAULT_OPENAI_MODEL,
    ...(options.streaming === true ? { streaming: true } : {}),
    configuration: {
      ...(parsed.OPENAI_BASE_URL === undefined ? {} : { baseURL: parsed.OPENAI_BASE_URL }),
      ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
    },
  });
}
