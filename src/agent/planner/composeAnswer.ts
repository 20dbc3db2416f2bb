import type { Plan, PlanStepOutcome } from "./plan.ts";

/** Longest string field shown in an answer line. */
const MAX_FIELD = 600;
/** Most fields of one result shown. */
const MAX_FIELDS = 8;

/**
 * The rule planner's final answer: a header naming the planner, then each document's results (the
 * scalar fields of each tool's JSON result, or its text), then what was skipped or failed.
 */
export function composeAnswer(plan: Plan, steps: readonly PlanStepOutcome[]): string {
  const lines = [
    `Answer by the rule planner (deterministic, no language model) for: ${JSON.stringify(plan.task)}`,
  ];
  if (plan.chosen.length === 0) {
    lines.push("No tool matches this task, so nothing was done.");
    return lines.join("\n");
  }
  lines.push(
    `Tools: ${plan.chosen.map((choice) => `${choice.tool} (matched ${choice.matched.join(", ")})`).join("; ")}.`,
  );
  const groups = new Map<string, PlanStepOutcome[]>();
  for (const step of steps) {
    const key = step.document ?? "";
    groups.set(key, [...(groups.get(key) ?? []), step]);
  }
  for (const [document, group] of groups) {
    lines.push("");
    if (document !== "") {
      const title = plan.titles[document];
      lines.push(title === undefined ? document : `${document} — ${title}`);
    }
    for (const step of group) {
      lines.push(
        `- ${step.tool}: ${step.error === undefined ? renderResult(step.result) : `failed: ${step.error}`}`,
      );
    }
  }
  for (const skip of plan.skipped) lines.push("", `Skipped ${skip.tool}: ${skip.reason}.`);
  const failed = steps.filter((step) => step.error !== undefined).length;
  if (failed > 0) lines.push("", `${failed} of ${steps.length} calls failed.`);
  return lines.join("\n");
}

function renderResult(result: string): string {
  let value: unknown;
  try {
    value = JSON.parse(result);
  } catch {
    return clip(result);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return clip(JSON.stringify(value));
  const fields = Object.entries(value)
    .filter(([, field]) => ["string", "number", "boolean"].includes(typeof field))
    .slice(0, MAX_FIELDS)
    .map(([key, field]) => `${key}: ${typeof field === "string" ? clip(field) : String(field)}`);
  return fields.length === 0 ? clip(result) : fields.join("; ");
}

function clip(text: string): string {
  return text.length > MAX_FIELD ? `${text.slice(0, MAX_FIELD)}…` : text;
}
