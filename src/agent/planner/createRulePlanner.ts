import { composeAnswer } from "./composeAnswer.ts";
import { describeTool, type PlannerTool, type ToolDescription } from "./describeTool.ts";
import type { Plan, PlannedCall, PlanSkip, PlanStepOutcome } from "./plan.ts";
import { type PlannerDocument, type PlannerInputs, PlannerInputsSchema } from "./plannerInputs.ts";
import { contentTerms, nameTerms, normalizeTerm, termsMatch } from "./taskTerms.ts";

export type RulePlanner = {
  readonly name: "rules";
  plan(task: string, tools: readonly PlannerTool[], inputs?: PlannerInputs): Plan;
  /** Calls per tool the plan for this task would make. */
  forecast(task: string, tools: readonly PlannerTool[], inputs?: PlannerInputs): Record<string, number>;
  /** The final answer text from the plan and the outcome of each of its calls, in order. */
  answer(plan: Plan, steps: readonly PlanStepOutcome[]): string;
};

/** A term matching a word of the tool's name counts this much more than one in its description. */
const NAME_WEIGHT = 3;
/** Parameters that take the text a call works on, in order of preference. */
const TEXT_PARAMETERS = ["text", "document", "content", "body", "input"];
const FAN_OUT = /\b(each|every|per|all|individually|respectively|separately)\b/i;
const NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];

type Candidate = { tool: ToolDescription; name: string[]; description: string[] };

/**
 * The deterministic rule planner: no language model, the same plan for the same task, tools and
 * inputs. It names itself "rules" in every plan and answer.
 *
 * - Choice: the task's content terms are matched against each tool's name (weight 3) and description
 *   (weight 1). Tools are chosen greedily by weight over the terms not yet covered; ties go to more
 *   name matches, then to fewer matches of already-covered terms (a reseller combining chosen tools
 *   loses to the specialist), then to the shorter description, then by name. Chosen tools run in the
 *   order the task first mentions them.
 * - Work: the documents the task names (by id or title), else the text it quotes ("…"), else the
 *   input `text`, else every input document. Over documents, "each", "every", "all", "per" (or a
 *   single document) make one call per document; otherwise the documents are joined into one text.
 * - Arguments: the text parameter (`text`, `document`, `content`, …) gets the document's text; a
 *   parameter named like an input key gets that input; a number parameter gets a number the task puts
 *   before its name ("in 2 sentences" → `sentences: 2`).
 *
 * @example
 * const planner = createRulePlanner();
 * const plan = planner.plan("Summarize each document in 2 sentences", tools, { documents });
 */
export function createRulePlanner(): RulePlanner {
  function plan(task: string, tools: readonly PlannerTool[], rawInputs: PlannerInputs = {}): Plan {
    const inputs = PlannerInputsSchema.parse(rawInputs);
    const chosen = chooseTools(task, tools.map(describeTool));
    const units = workUnits(task, inputs);
    const skipped: PlanSkip[] = [];
    const calls: PlannedCall[] = [];
    const perUnit: { tool: ToolDescription; textParameter: string }[] = [];
    const once: ToolDescription[] = [];
    for (const { tool } of chosen) {
      const textParameter = TEXT_PARAMETERS.find((name) =>
        tool.parameters.some(
          (parameter) =>
            parameter.name === name && (parameter.type === "string" || parameter.type === undefined),
        ),
      );
      if (textParameter === undefined) once.push(tool);
      else if (units.length === 0)
        skipped.push({ tool: tool.name, reason: "no text or documents to work on" });
      else perUnit.push({ tool, textParameter });
    }
    for (const unit of units) {
      for (const { tool, textParameter } of perUnit) {
        const args = fillArguments(task, tool, inputs, { [textParameter]: unit.text });
        if (typeof args === "string") {
          if (!skipped.some((skip) => skip.tool === tool.name))
            skipped.push({ tool: tool.name, reason: args });
          continue;
        }
        calls.push({ tool: tool.name, args, document: unit.id });
      }
    }
    for (const tool of once) {
      const args = fillArguments(task, tool, inputs, {});
      if (typeof args === "string") skipped.push({ tool: tool.name, reason: args });
      else calls.push({ tool: tool.name, args });
    }
    const forecast: Record<string, number> = {};
    for (const call of calls) forecast[call.tool] = (forecast[call.tool] ?? 0) + 1;
    const titles: Record<string, string> = {};
    for (const unit of units)
      if (unit.id !== undefined && unit.title !== undefined) titles[unit.id] = unit.title;
    return {
      planner: "rules",
      task,
      chosen: chosen.map(({ tool, matched }) => ({ tool: tool.name, matched })),
      skipped,
      calls,
      forecast,
      titles,
    };
  }

  return {
    name: "rules",
    plan,
    forecast: (task, tools, inputs) => plan(task, tools, inputs).forecast,
    answer: (finished, steps) => composeAnswer(finished, steps),
  };
}

function chooseTools(task: string, tools: ToolDescription[]): { tool: ToolDescription; matched: string[] }[] {
  const terms = contentTerms(task);
  const candidates: Candidate[] = tools.map((tool) => ({
    tool,
    name: nameTerms(tool.name),
    description: contentTerms(tool.description),
  }));
  const weight = (candidate: Candidate, term: string): number => {
    if (candidate.name.some((word) => termsMatch(word, term))) return NAME_WEIGHT;
    return candidate.description.some((word) => termsMatch(word, term)) ? 1 : 0;
  };
  const covered = new Set<string>();
  const chosen: { tool: ToolDescription; matched: string[]; position: number }[] = [];
  const remaining = [...candidates];
  for (;;) {
    const ranked = remaining
      .map((candidate) => {
        const fresh = terms.filter((term) => !covered.has(term) && weight(candidate, term) > 0);
        return {
          candidate,
          fresh,
          score: fresh.reduce((sum, term) => sum + weight(candidate, term), 0),
          nameHits: fresh.filter((term) => weight(candidate, term) === NAME_WEIGHT).length,
          overlap: terms.filter((term) => covered.has(term) && weight(candidate, term) > 0).length,
        };
      })
      .filter((entry) => entry.score > 0)
      .sort(
        (a, b) =>
          b.score - a.score ||
          b.nameHits - a.nameHits ||
          a.overlap - b.overlap ||
          a.candidate.description.length - b.candidate.description.length ||
          a.candidate.tool.name.localeCompare(b.candidate.tool.name),
      );
    const best = ranked[0];
    if (best === undefined) break;
    for (const term of best.fresh) covered.add(term);
    remaining.splice(remaining.indexOf(best.candidate), 1);
    chosen.push({
      tool: best.candidate.tool,
      matched: best.fresh,
      position: Math.min(...best.fresh.map((term) => terms.indexOf(term))),
    });
  }
  return chosen.sort((a, b) => a.position - b.position).map(({ tool, matched }) => ({ tool, matched }));
}

type WorkUnit = { id: string | undefined; title: string | undefined; text: string };

function workUnits(task: string, inputs: PlannerInputs): WorkUnit[] {
  const documents = inputs.documents ?? [];
  const named = documents.filter((document) => mentions(task, document));
  const quoted = quotedText(task);
  // Most specific first: documents the task names, text it quotes, the input text, then all documents.
  if (named.length === 0) {
    const text = quoted ?? inputs.text;
    if (text !== undefined) return [{ id: undefined, title: undefined, text }];
  }
  const selected = named.length > 0 ? named : documents;
  if (selected.length <= 1 || FAN_OUT.test(task)) {
    return selected.map((document) => ({ id: document.id, title: document.title, text: document.text }));
  }
  const text = selected
    .map((document) => (document.title === undefined ? document.text : `${document.title}\n${document.text}`))
    .join("\n\n");
  return [{ id: undefined, title: undefined, text }];
}

function mentions(task: string, document: PlannerDocument): boolean {
  const lower = task.toLowerCase();
  const escaped = document.id.toLowerCase().replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  if (new RegExp(`(^|[^\\p{L}\\p{N}_-])${escaped}($|[^\\p{L}\\p{N}_-])`, "u").test(lower)) return true;
  return (
    document.title !== undefined && document.title.length >= 4 && lower.includes(document.title.toLowerCase())
  );
}

/** Text the task quotes ("…", “…”, «…»), when it carries its own text. */
function quotedText(task: string): string | undefined {
  const match = /"([^"]+)"|“([^”]+)”|«([^»]+)»/u.exec(task);
  return match === null ? undefined : (match[1] ?? match[2] ?? match[3]);
}

/** The arguments of one call, or the reason it cannot be made. */
function fillArguments(
  task: string,
  tool: ToolDescription,
  inputs: PlannerInputs,
  given: Record<string, unknown>,
): Record<string, unknown> | string {
  const args: Record<string, unknown> = {};
  for (const parameter of tool.parameters) {
    const { name } = parameter;
    if (name in given) {
      args[name] = given[name];
      continue;
    }
    if (name !== "documents" && name !== "text" && inputs[name] !== undefined) {
      args[name] = inputs[name];
      continue;
    }
    if (parameter.type === "integer" || parameter.type === "number") {
      const number = numberBefore(task, name);
      if (number !== undefined) {
        args[name] = number;
        continue;
      }
    }
    if (parameter.required) return `missing argument "${name}"`;
  }
  return args;
}

/** A number the task writes right before a word matching `name`: "in 2 sentences", "three sentences". */
function numberBefore(task: string, name: string): number | undefined {
  const target = normalizeTerm(name);
  const pattern = /(\d+|zero|one|two|three|four|five|six|seven|eight|nine|ten)\s+(\p{L}+)/giu;
  for (const match of task.matchAll(pattern)) {
    const word = normalizeTerm(match[2] ?? "");
    if (!termsMatch(word, target)) continue;
    const value = match[1] ?? "";
    const index = NUMBER_WORDS.indexOf(value.toLowerCase());
    return index >= 0 ? index : Number(value);
  }
  return undefined;
}
