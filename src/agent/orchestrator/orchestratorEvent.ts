/** What a run reports as it goes: its events, in order, and the log lines it writes. */
import type { Plan } from "../planner/plan.ts";
import type { OrchestratorStep } from "./runToolCall.ts";
import type { SpendApprovalRequest } from "./spendApproval.ts";

/** What happens during a run, in order; the spend report and progress displays are built from these. */
export type OrchestratorEvent =
  | { type: "plan"; planner: "rules"; plan: Plan }
  | { type: "model"; planner: string; turn: number; toolCalls: number }
  | {
      type: "tool:start";
      index: number;
      callId: string;
      tool: string;
      args: Record<string, unknown>;
      document?: string | undefined;
    }
  | { type: "tool:end"; step: OrchestratorStep }
  /** A spend-approval question was answered (model path; see `approve`). */
  | { type: "approval"; request: SpendApprovalRequest; approved: boolean }
  | { type: "answer"; planner: string; answer: string };

/** The narrow logger the orchestrator writes to; a pino logger satisfies it. */
export type OrchestratorLogger = {
  info(object: object, message?: string): void;
  warn(object: object, message?: string): void;
};
