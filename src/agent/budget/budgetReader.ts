/** The ledger's report: limits and usage read together under the agent's lock, built by `buildBudgetReport`. */
import type { Clock } from "../../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import type { Queryable, Store } from "../../store/store.ts";
import { readBudgetLimits } from "./budgetLimitRecords.ts";
import type { AgentId } from "./budgetLimits.ts";
import { type BudgetReport, buildBudgetReport } from "./budgetReport.ts";
import { readBudgetUsage } from "./budgetUsageRecords.ts";

export type BudgetReader = {
  /** The agent's report inside `tx`, after taking its row lock; `undefined` if it has no budget. */
  load(tx: Queryable, agent: AgentId, lock: "FOR UPDATE" | "FOR SHARE"): Promise<BudgetReport | undefined>;
  /** The agent's report in a transaction of its own. Throws `NotFound` without a budget. */
  report(agent: AgentId): Promise<BudgetReport>;
};

export function createBudgetReader({ store, clock }: { store: Store; clock: Clock }): BudgetReader {
  async function load(tx: Queryable, agent: AgentId, lock: "FOR UPDATE" | "FOR SHARE") {
    const limits = await readBudgetLimits(tx, agent, lock);
    if (limits === undefined) return undefined;
    // Read the clock after the lock: the order of "now" then agrees with the order of the holds.
    const at = new Date(clock.now());
    return buildBudgetReport({ agent, at, limits, usage: await readBudgetUsage(tx, agent, at) });
  }

  async function report(agent: AgentId): Promise<BudgetReport> {
    const found = await store.transaction((tx) => load(tx, agent, "FOR SHARE"));
    if (found === undefined) {
      throw new TollgateError(ErrorCode.NotFound, `agent "${agent}" has no budget`, { details: { agent } });
    }
    return found;
  }

  return { load, report };
}
