/** The agents the agents' store has budgets for (the dashboard's agent list). */
import { z } from "zod";
import { queryParsed } from "../../store/queryParsed.ts";
import type { Queryable } from "../../store/store.ts";

/** Built once: a zod object schema compiles its parser on first use. */
const AgentRowSchema = z.object({ agent: z.string() });

/** Agent ids with a budget, alphabetically (at most 200). */
export async function listAgents(db: Queryable): Promise<string[]> {
  const rows = await queryParsed(
    db,
    AgentRowSchema,
    "SELECT agent FROM agent_budgets ORDER BY agent LIMIT 200",
  );
  return rows.map((r) => r.agent);
}
