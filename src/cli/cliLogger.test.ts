import { describe, expect, it } from "vitest";
import { TollgateError } from "../protocol/errors.ts";
import { createCliLogger, formatLogLine, logFormatFor } from "./cliLogger.ts";

/** A logger writing into a list, as the CLI's writes to stderr. */
function captured(format: "pretty" | "json") {
  const lines: string[] = [];
  const logger = createCliLogger({
    name: "agent",
    level: "info",
    format,
    destination: { write: (text: string) => lines.push(text) },
  });
  return { logger, lines };
}

const refusal = () =>
  new TollgateError(
    "BudgetExceeded",
    "summarize would spend 0.02 USDC; 0.01 USDC left in researcher's total",
  );

describe("logFormatFor", () => {
  it("gives human lines when stdout and stderr are terminals, JSON otherwise", () => {
    expect(logFormatFor({}, { stdout: true, stderr: true })).toBe("pretty");
    expect(logFormatFor({}, { stdout: false, stderr: true })).toBe("json");
    expect(logFormatFor({}, { stdout: true, stderr: false })).toBe("json");
  });

  it("lets LOG_FORMAT choose either way", () => {
    expect(logFormatFor({ LOG_FORMAT: "json" }, { stdout: true, stderr: true })).toBe("json");
    expect(logFormatFor({ LOG_FORMAT: "pretty" }, { stdout: false, stderr: false })).toBe("pretty");
    expect(logFormatFor({ LOG_FORMAT: "" }, { stdout: true, stderr: true })).toBe("pretty");
    expect(() => logFormatFor({ LOG_FORMAT: "xml" }, { stdout: true, stderr: true })).toThrow();
  });
});

describe("createCliLogger", () => {
  it("writes a budget refusal as one human line without its stack", () => {
    const { logger, lines } = captured("pretty");
    logger.warn({ tool: "summarize", code: "BudgetExceeded", err: refusal() }, "paid tool call failed");
    expect(lines).toEqual([
      "agent warn: paid tool call failed: BudgetExceeded: summarize would spend 0.02 USDC; 0.01 USDC left in researcher's total (tool=summarize)\n",
    ]);
  });

  it("keeps the stack of an unforeseen error, indented under its line", () => {
    const { logger, lines } = captured("pretty");
    logger.warn({ err: new Error("socket hang up") }, "could not record a spend event");
    const [line] = lines;
    expect(line?.split("\n")[0]).toBe("agent warn: could not record a spend event: socket hang up");
    expect(line?.split("\n")[1]).toMatch(/^ {4}at /);
  });

  it("writes JSON lines in JSON format, a refusal without its stack", () => {
    const { logger, lines } = captured("json");
    logger.warn({ tool: "summarize", err: refusal() }, "paid tool call failed");
    expect(lines).toHaveLength(1);
    const entry = JSON.parse(lines[0]!) as { msg: string; tool: string; err: Record<string, unknown> };
    expect(entry.msg).toBe("paid tool call failed");
    expect(entry.tool).toBe("summarize");
    expect(entry.err.code).toBe("BudgetExceeded");
    expect(entry.err.stack).toBeUndefined();
  });
});

describe("formatLogLine", () => {
  it("passes a line that is not JSON through", () => {
    expect(formatLogLine("plain text")).toBe("plain text\n");
  });
});
