import type { DemandHistory } from "./createDemandHistory.ts";
import type { PolicyForecast } from "./decide.ts";
import type { PolicyOffer } from "./policyOffer.ts";

/**
 * Records one call made by a paid tool in the agent's learned demand: to the plan of the 402 it met
 * (with the one-time price offered beside it), or else to the plan of the subscription it was sent
 * under. Every call counts, however it was paid. A store that fails here costs the call nothing: the
 * estimate just misses one call, and the failure is logged.
 */
export async function recordDemand(
  options: {
    demand?: DemandHistory | undefined;
    /** The planner's forecast for the tool (the prior the call was decided on): its bias is learned. */
    forecast?: (() => PolicyForecast | undefined) | undefined;
    logger?: { warn(obj: object, msg: string): void } | undefined;
  },
  agent: string,
  offer: PolicyOffer | undefined,
  held: { provider: string; planId: string; interval: number } | undefined,
): Promise<void> {
  if (options.demand === undefined) return;
  const plan =
    offer?.subscription !== undefined
      ? {
          provider: offer.provider,
          planId: offer.subscription.planId,
          interval: offer.subscription.interval,
          oneTimePrice: offer.oneTime?.amount,
        }
      : held === undefined
        ? undefined
        : { ...held, oneTimePrice: undefined };
  if (plan === undefined) return;
  try {
    await options.demand.record({ agent, provider: plan.provider, planId: plan.planId }, plan.interval, {
      oneTimePrice: plan.oneTimePrice,
      prior: options.forecast?.(),
    });
  } catch (error) {
    options.logger?.warn({ agent, err: error }, "could not record a call in the learned demand");
  }
}
