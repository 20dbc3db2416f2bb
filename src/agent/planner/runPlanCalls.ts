/**
 * Runs a rule plan's calls the way a model turn's calls run (src/agent/orchestrator/toolQueue.ts): the
 * calls of a plan do not depend on each other (their arguments come from the task and its inputs, never
 * from another call's result), so they all go through the queue at once, limited per seller and for
 * the run; identical calls (same tool, same arguments) are made once and share the outcome. Outcomes
 * come back in the plan's order, whatever order they finish in.
 *
 * A tool that may subscribe (its listing offers a plan) leads alone: its first call runs before the
 * others start, one such tool at a time, so the subscribe-or-pay decision, the subscription and its
 * token approval (a permit signed with the wallet's next nonce) are taken once, in plan order, not
 * raced by its own later calls or by another plan's approval from the same wallet.
 *
 * The budget holds under this concurrency because the ledger's reserve is atomic: calls that would
 * together pass a limit are refused (`BudgetExceeded`), never paid.
 */
import type { ToolQueue } from "../orchestrator/toolQueue.ts";
import type { PlannedCall } from "./plan.ts";

/** One call as the orchestrator makes it: its index in the plan and its id. */
export type PlanCallRequest = {
  index: number;
  callId: string;
  tool: string;
  args: Record<string, unknown>;
  document?: string | undefined;
};

export type RunPlanCallsOptions<S> = {
  queue: ToolQueue;
  /** The key the queue limits a tool's calls by: its seller, else its name. */
  sellerOf(tool: string): string;
  /** Makes one call (inside its queue slot). */
  call(request: PlanCallRequest): Promise<S>;
  /** True for a tool whose first call must run alone (it may subscribe). Default: none. */
  leadsAlone?: ((tool: string) => boolean) | undefined;
  /** The outcome of a call identical to `first`, made once: it shares `first`'s outcome. */
  duplicate(request: PlanCallRequest, first: PlanCallRequest, outcome: S): Promise<S>;
  signal?: AbortSignal | undefined;
};

/** JSON with object keys sorted: the identity of a call's arguments. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/**
 * @example
 * const steps = await runPlanCalls(plan.calls, { queue, sellerOf, call: (r) => callTool(r), duplicate });
 */
export async function runPlanCalls<S>(
  calls: readonly PlannedCall[],
  options: RunPlanCallsOptions<S>,
): Promise<S[]> {
  const first = new Map<string, { request: PlanCallRequest; outcome: Promise<S> }>();
  // The first call of each tool that may subscribe, one at a time, in plan order.
  const led = new Set<string>();
  const leads = new Map<number, S>();
  for (const [index, planned] of calls.entries()) {
    if (led.has(planned.tool) || options.leadsAlone?.(planned.tool) !== true) continue;
    led.add(planned.tool);
    options.signal?.throwIfAborted();
    const request: PlanCallRequest = {
      index,
      callId: `rules_${index + 1}`,
      tool: planned.tool,
      args: planned.args,
      document: planned.document,
    };
    const outcome = options.queue.run(
      options.sellerOf(planned.tool),
      () => options.call(request),
      options.signal,
    );
    first.set(`${planned.tool}\u0000${canonical(planned.args)}`, { request, outcome });
    leads.set(index, await outcome);
  }
  const outcomes = calls.map((planned, index) => {
    const lead = leads.get(index);
    if (lead !== undefined) return Promise.resolve(lead);
    options.signal?.throwIfAborted();
    const request: PlanCallRequest = {
      index,
      callId: `rules_${index + 1}`,
      tool: planned.tool,
      args: planned.args,
      document: planned.document,
    };
    const key = `${planned.tool}\u0000${canonical(planned.args)}`;
    const made = first.get(key);
    if (made !== undefined) {
      return made.outcome.then((outcome) => options.duplicate(request, made.request, outcome));
    }
    const outcome = options.queue.run(
      options.sellerOf(planned.tool),
      () => options.call(request),
      options.signal,
    );
    first.set(key, { request, outcome });
    return outcome;
  });
  return Promise.all(outcomes);
}
