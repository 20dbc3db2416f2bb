/** What a paid tool's policy reads: calls expected within a horizon (the plan interval). */
export type ToolForecast = { calls: number; horizonSeconds: number };

/**
 * Turns a planner's calls-per-tool into the per-tool forecast a paid tool's policy asks for. The
 * counts are read when asked, so a lookup can be handed to paid tools before the plan that fills it
 * exists (tools are discovered first, then planned with). `runsPerHorizon` scales one run's calls to
 * the horizon, e.g. 30 for a task run daily against a monthly plan.
 *
 * @example
 * const counts: Record<string, number> = {};
 * const tools = await discoverTools({ …, forecast: forecastLookup(() => counts, { horizonSeconds: MONTH }) });
 * Object.assign(counts, orchestrator.forecast(task, inputs));
 */
export function forecastLookup(
  counts: Record<string, number> | (() => Record<string, number>),
  options: { horizonSeconds: number; runsPerHorizon?: number },
): (toolName: string) => ToolForecast | undefined {
  const runs = options.runsPerHorizon ?? 1;
  if (!Number.isInteger(options.horizonSeconds) || options.horizonSeconds <= 0) {
    throw new RangeError("horizonSeconds must be a positive integer");
  }
  if (!Number.isInteger(runs) || runs < 1) throw new RangeError("runsPerHorizon must be a positive integer");
  return (toolName) => {
    const current = typeof counts === "function" ? counts() : counts;
    const calls = Object.hasOwn(current, toolName) ? current[toolName] : undefined;
    return calls === undefined ? undefined : { calls: calls * runs, horizonSeconds: options.horizonSeconds };
  };
}
