/** The rule planner's plan: what it chose, skipped and will call, and what the answer reads back. */

/** One tool call the rule planner intends to make. */
export type PlannedCall = {
  tool: string;
  args: Record<string, unknown>;
  /** The document the call works on, when the plan fans out over documents. */
  document?: string | undefined;
};

export type PlanChoice = { tool: string; matched: string[] };
export type PlanSkip = { tool: string; reason: string };

export type Plan = {
  planner: "rules";
  task: string;
  /** Tools chosen, in the order the task mentions them, with the task terms each matched. */
  chosen: PlanChoice[];
  /** Chosen tools that cannot be called, and why (a required argument the inputs do not give). */
  skipped: PlanSkip[];
  calls: PlannedCall[];
  /** Calls per tool this plan makes: the policy's forecast for a subscribe-or-pay decision. */
  forecast: Record<string, number>;
  /** Titles of the documents the plan works on, by id, for the answer. */
  titles: Record<string, string>;
};

/** A call's outcome as the answer needs it (the orchestrator's steps satisfy it). */
export type PlanStepOutcome = {
  tool: string;
  document?: string | undefined;
  result: string;
  error?: string | undefined;
};
