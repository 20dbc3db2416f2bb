/**
 * The research orchestrator: runs a task over the bundled documents with Tollgate's offline tools,
 * through the rule planner or, when `OPENAI_API_KEY` is set, a chat model.
 *
 *   npx tsx agents/research.ts [task…]
 */
import { pathToFileURL } from "node:url";
import type { BaseChatModel } from "@langchain/core/language_models/chat_models";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { createOrchestrator, type OrchestratorRun } from "../src/agent/orchestrator/createOrchestrator.ts";
import { modelFromEnv } from "../src/agent/orchestrator/modelFromEnv.ts";
import type { OrchestratorEvent, OrchestratorLogger } from "../src/agent/orchestrator/orchestratorEvent.ts";
import type { PlannerDocument } from "../src/agent/planner/plannerInputs.ts";
import { loadTools } from "../src/agent/tools/loadTool.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { toolsDir } from "../tools/toolsDir.ts";
import { loadDocuments } from "./loadDocuments.ts";

export const DEFAULT_RESEARCH_TASK =
  "Summarize each document in 2 sentences, detect its language and score its mood.";

/** The bundled local tools the research run uses by default. */
export const RESEARCH_TOOL_NAMES = ["summarize", "sentiment", "detect-language", "word-stats"] as const;

/** Local tools by name from a tools directory; a remote tool there needs `discoverTools` (paid) instead. */
export async function loadLocalTools(
  names: readonly string[],
  dir: string = toolsDir,
): Promise<StructuredToolInterface[]> {
  const loaded = await loadTools(names, { dir });
  return loaded.map((entry) => {
    if (entry.kind === "remote") {
      throw new TollgateError(
        "InvalidRequest",
        `tool ${entry.manifest.name} is remote (paid): load it with discoverTools and a payer`,
      );
    }
    return entry.tool;
  });
}

export type ResearchOptions = {
  task?: string | undefined;
  /** Default: the bundled documents. */
  documents?: PlannerDocument[] | undefined;
  /** Default: the bundled local tools of `RESEARCH_TOOL_NAMES`. */
  tools?: readonly StructuredToolInterface[] | undefined;
  /** Default: the rule planner. */
  model?: BaseChatModel | "rules" | undefined;
  logger?: OrchestratorLogger | undefined;
  onEvent?: ((event: OrchestratorEvent) => void | Promise<void>) | undefined;
  signal?: AbortSignal | undefined;
};

/**
 * Runs a research task over documents with an orchestrator.
 *
 * @example
 * const { answer, steps } = await runResearch({ task: "Detect the language of each document" });
 */
export async function runResearch(options: ResearchOptions = {}): Promise<OrchestratorRun> {
  const tools = options.tools ?? (await loadLocalTools(RESEARCH_TOOL_NAMES));
  const documents = options.documents ?? (await loadDocuments());
  const orchestrator = createOrchestrator({
    tools,
    model: options.model ?? "rules",
    logger: options.logger,
    onEvent: options.onEvent,
  });
  return orchestrator.run(options.task ?? DEFAULT_RESEARCH_TASK, { documents }, { signal: options.signal });
}

/** The script: the task from the arguments (or the default), the model from the environment. */
export async function main(
  options: {
    argv?: readonly string[];
    env?: Record<string, string | undefined>;
    print?: (line: string) => void;
  } = {},
): Promise<number> {
  const argv = options.argv ?? process.argv.slice(2);
  const print = options.print ?? ((line: string) => console.log(line));
  const model = modelFromEnv(options.env ?? process.env);
  const task = argv.join(" ").trim() || DEFAULT_RESEARCH_TASK;
  const run = await runResearch({
    task,
    model,
    onEvent: (event) => {
      if (event.type === "tool:end") {
        const where = event.step.document === undefined ? "" : ` ${event.step.document}`;
        print(`  ${event.step.error === undefined ? "ok" : "failed"} ${event.step.tool}${where}`);
      }
    },
  });
  print("");
  print(run.answer);
  print("");
  print(
    run.planner === "rules"
      ? `planner: rules (the deterministic rule planner; set OPENAI_API_KEY to plan with a model) — ${run.steps.length} tool calls`
      : `planner: ${run.planner} — ${run.steps.length} tool calls`,
  );
  return run.steps.some((step) => step.error !== undefined) ? 1 : 0;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exitCode = 1;
    },
  );
}
