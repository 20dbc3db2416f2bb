/**
 * The CLI's log: human lines on a terminal, JSON lines (pino's own) when the output is read by a
 * program or `LOG_FORMAT=json` asks for it. An expected outcome with a stable code (a budget refusal,
 * a denied approval) is logged without its stack, so it stays one line in either format.
 */
import pino, { type DestinationStream, type Logger } from "pino";
import { z } from "zod";
import { ErrorCodeSchema } from "../protocol/errors.ts";

export type LogFormat = "pretty" | "json";

export const LogFormatEnvSchema = z.object({
  /** `json` keeps JSON lines on a terminal; `pretty` gives human lines even when piped. */
  LOG_FORMAT: z.preprocess((v) => (v === "" ? undefined : v), z.enum(["pretty", "json"]).optional()),
});

/**
 * Human lines only when a person reads both streams: with stdout piped (`--json | jq`, a script) or
 * the log redirected, a program reads it and gets JSON.
 */
export function logFormatFor(
  env: Record<string, string | undefined>,
  terminal: { stdout: boolean; stderr: boolean },
): LogFormat {
  const { LOG_FORMAT } = LogFormatEnvSchema.parse(env);
  return LOG_FORMAT ?? (terminal.stdout && terminal.stderr ? "pretty" : "json");
}

const LEVEL_NAMES: Readonly<Record<number, string>> = {
  10: "trace",
  20: "debug",
  30: "info",
  40: "warn",
  50: "error",
  60: "fatal",
};

/** Fields every pino line has, left out of the human line (the time is the terminal's to show). */
const OMITTED = new Set(["level", "time", "pid", "hostname", "name", "msg", "err"]);

/** An error with a catalogued code other than `Internal` is an outcome foreseen: its stack says nothing more. */
function isExpectedOutcome(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return error instanceof Error && code !== "Internal" && ErrorCodeSchema.safeParse(code).success;
}

/** pino's error serializer, without the stack of an expected outcome. */
export function serializeError(error: unknown): unknown {
  const serialized = pino.stdSerializers.err(error as Error) as unknown as Record<string, unknown>;
  if (!isExpectedOutcome(error)) return serialized;
  const { stack: _stack, ...rest } = serialized;
  return rest;
}

const valueText = (value: unknown) => (typeof value === "string" ? value : JSON.stringify(value));

/**
 * One pino JSON line as a human line: `agent warn: paid tool call failed: BudgetExceeded: … (tool=x)`;
 * an unforeseen error's stack follows, indented.
 */
export function formatLogLine(line: string): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith("\n") ? line : `${line}\n`;
  }
  const level = LEVEL_NAMES[entry.level as number] ?? String(entry.level);
  const err = entry.err as { code?: unknown; message?: unknown; stack?: unknown } | undefined;
  const fields = Object.entries(entry)
    // A `code` field repeating the error's own is said once.
    .filter(
      ([key, value]) => !OMITTED.has(key) && value !== undefined && !(key === "code" && value === err?.code),
    )
    .map(([key, value]) => `${key}=${valueText(value)}`);
  const reason =
    err === undefined
      ? ""
      : `: ${typeof err.code === "string" ? `${err.code}: ` : ""}${valueText(err.message)}`;
  const head = `${entry.name === undefined ? "" : `${valueText(entry.name)} `}${level}: ${valueText(entry.msg ?? "")}`;
  const stack =
    typeof err?.stack === "string"
      ? `\n${err.stack
          .split("\n")
          .slice(1)
          .map((l) => `    ${l.trim()}`)
          .join("\n")}`
      : "";
  return `${head}${reason}${fields.length > 0 ? ` (${fields.join(", ")})` : ""}${stack}\n`;
}

/** A stream that writes each pino line to `destination` as `formatLogLine` reads it. */
export function prettyStream(destination: { write(text: string): unknown }): DestinationStream {
  return { write: (line: string) => void destination.write(formatLogLine(line)) };
}

export type CliLoggerOptions = {
  name: string;
  level: string;
  format: LogFormat;
  /** Where lines go (default: stderr, written synchronously so they keep their place among the output). */
  destination?: { write(text: string): unknown } | undefined;
};

/**
 * The logger a CLI command writes to.
 *
 * @example
 * const logger = createCliLogger({ name: "agent", level: "warn", format: logFormatFor(process.env, terminal) });
 */
export function createCliLogger(options: CliLoggerOptions): Logger {
  const destination = options.destination ?? pino.destination({ dest: 2, sync: true });
  const stream = options.format === "pretty" ? prettyStream(destination) : (destination as DestinationStream);
  return pino({ name: options.name, level: options.level, serializers: { err: serializeError } }, stream);
}
