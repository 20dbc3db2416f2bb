/**
 * The subscription gate's `check` (createSubscriptionGate.ts): the id and token's presence, then the
 * steady path that awaits nothing (the token's signer, the state and the plan all cached and matching),
 * else the path that reads and explains (a first use, a refusal), both ending in `decide`
 * (subscriptionUse.ts).
 */
import { sameAddress } from "../../../protocol/address.ts";
import { SubscriptionIdSchema } from "../../../protocol/subscriptionAuth.ts";
import type { SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { refuse, type SubscriptionGateContext } from "./subscriptionGateContext.ts";
import type { SubscriptionOutcome, SubscriptionRoute } from "./subscriptionGateTypes.ts";
import { type CheckRequest, decide } from "./subscriptionUse.ts";

/** A canonical decimal below 10^16: a valid `SubscriptionIdSchema` value. */
const SHORT_ID = /^(?:0|[1-9][0-9]{0,15})$/;

export function checkSubscription(
  ctx: SubscriptionGateContext,
  request: CheckRequest,
): SubscriptionOutcome | Promise<SubscriptionOutcome> {
  const { subscriptionId, token } = request;
  // Ids under 16 digits (every id a chain hands out for years) are checked without the schema.
  if (!SHORT_ID.test(subscriptionId) && !SubscriptionIdSchema.safeParse(subscriptionId).success) {
    return refuse("SubscriptionAuthInvalid", "X-Tollgate-Sub must be a subscription id in decimal");
  }
  if (token === null || token === "") {
    return refuse(
      "SubscriptionAuthInvalid",
      "X-Tollgate-Sub-Auth is missing: a subscription id alone is not a credential; sign a sub-auth token",
    );
  }
  // Steady use: the token's signer, the state and the plan all cached and matching, so nothing is
  // awaited. Anything else (a first use, a refusal) takes the path that reads and explains.
  const verdict = ctx.verifier.accepted(token, subscriptionId);
  const info = verdict === undefined ? undefined : ctx.statuses.cached(subscriptionId)?.state;
  if (
    verdict !== undefined &&
    info !== undefined &&
    sameAddress(info.subscriber, verdict.signer) &&
    covers(ctx, request.route, info)
  ) {
    const plan = ctx.options.plans.peek(info.planId);
    if (plan !== undefined) return decide(ctx, request, info, plan);
  }
  return checkReading(ctx, request, token);
}

/** The path that may wait: a token to recover, a state or a plan to read. */
async function checkReading(
  ctx: SubscriptionGateContext,
  request: CheckRequest,
  token: string,
): Promise<SubscriptionOutcome> {
  const { verifier, options } = ctx;
  const { subscriptionId, route } = request;
  const verdict = await verifier.verify(token, subscriptionId);
  if (!verdict.ok) return refuse("SubscriptionAuthInvalid", `subscription auth refused: ${verdict.reason}`);

  const info = await ctx.statuses.get(subscriptionId);
  if (info === undefined) {
    // A token for an id that does not exist is a stranger's: it keeps no slot in the token cache.
    verifier.forget(token);
    return refuse("SubscriptionNotActive", `subscription ${subscriptionId} does not exist`);
  }
  if (!sameAddress(info.subscriber, verdict.signer)) {
    // Not the subscriber's own key: the subscriber may be a wallet that this key signs for.
    if (
      options.walletSubAuth === undefined ||
      !(await options.walletSubAuth(info.subscriber, token, verdict.signer))
    ) {
      verifier.forget(token);
      return refuse(
        "SubscriptionAuthInvalid",
        `the token is not signed by subscription ${subscriptionId}'s subscriber`,
      );
    }
    verifier.vouch(token, info.subscriber);
  }
  if (!covers(ctx, route, info)) {
    return refuse(
      "PaymentRequired",
      `subscription ${subscriptionId} is to plan ${info.planId}, which does not cover this resource (plans here: ${route.offers.map((offer) => offer.planId).join(", ")})`,
    );
  }
  // The plan is this route's; reading it through the catalog also proves it is this gate's own.
  return decide(ctx, request, info, await options.plans.get(info.planId));
}

/** Whether the subscription is sold by this gate under one of the route's plans. */
function covers(ctx: SubscriptionGateContext, route: SubscriptionRoute, info: SubscriptionInfo): boolean {
  if (!sameAddress(info.provider, ctx.options.payTo)) return false;
  const offers = route.offers;
  for (let i = 0; i < offers.length; i++) if (offers[i]?.planId === info.planId) return true;
  return false;
}
