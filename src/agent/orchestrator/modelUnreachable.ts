/**
 * What a run says when its chat model cannot be reached: a refused connection, an unknown host or a
 * request that outlasts its timeout ends the run at once (LangChain would otherwise retry it six times
 * with backoff, about 100 s of silence) with an error naming the server, the model and the fixes.
 */
import { AsyncCaller, type FailedAttemptHandler } from "@langchain/core/utils/async_caller";
import { TollgateError } from "../../protocol/errors.ts";

/** The model a request went to, for the message. */
export type ModelTarget = { model: string; baseURL: string; timeoutMs: number };

/** Network codes that no retry soon will change: nothing listens there, or the host does not exist. */
const UNREACHABLE_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

/** The first network code in an error's `cause` chain (the OpenAI client wraps fetch's error twice). */
function networkCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string" && UNREACHABLE_CODES.has(code)) return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** LangChain names the OpenAI client's timeout `TimeoutError` ("Request timed out."). */
function isTimeout(error: unknown): boolean {
  return error instanceof Error && error.name === "TimeoutError";
}

/**
 * The error to end the run with when `error` says the model is unreachable, else `undefined` (the
 * failure is left to LangChain's retries).
 */
export function unreachableModelError(error: unknown, target: ModelTarget): TollgateError | undefined {
  const code = networkCode(error);
  const why =
    code === "ECONNREFUSED"
      ? "the connection was refused"
      : code !== undefined
        ? `the host cannot be reached (${code})`
        : isTimeout(error)
          ? `it did not answer within ${target.timeoutMs} ms`
          : undefined;
  if (why === undefined) return undefined;
  return new TollgateError(
    "ModelUnreachable",
    `cannot reach the model ${target.model} at ${target.baseURL}: ${why}. ` +
      "Point OPENAI_BASE_URL at a running OpenAI-compatible server (and check OPENAI_API_KEY), " +
      "raise TOLLGATE_MODEL_TIMEOUT_MS for a slow one, " +
      "or set TOLLGATE_PLANNER=rules to run offline with the rule planner.",
    { details: { model: target.model, baseURL: target.baseURL, reason: code ?? "timeout" }, cause: error },
  );
}

/** Reads LangChain's own retry rules (4xx not retried, rate limits sorted), which a custom handler replaces. */
class LangChainRetryRules extends AsyncCaller {
  readonly rules = this.onFailedAttempt;
}

/**
 * A ChatOpenAI `onFailedAttempt`: an unreachable model fails at once with `unreachableModelError`;
 * every other failure goes through LangChain's usual rules.
 */
export function failFastWhenUnreachable(
  target: ModelTarget,
  onUnreachable?: (error: unknown) => void,
): FailedAttemptHandler {
  const rules = new LangChainRetryRules({}).rules;
  return (error: unknown) => {
    const unreachable = unreachableModelError(error, target);
    if (unreachable !== undefined) {
      onUnreachable?.(error);
      throw unreachable;
    }
    return rules?.(error);
  };
}
