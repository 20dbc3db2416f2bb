/**
 * `POST /usage` and `GET /usage` (provider-authenticated): metered deductions recorded durably and
 * settled in batches by the usage settler (docs/subscriptions.md).
 */
import type { Hono } from "hono";
import { type Address, getAddress } from "viem";
import { z } from "zod";
import { getSubscription } from "../../../../chain/actions/subscriptions/getSubscription.ts";
import type { FacilitatorContext } from "../../../../facilitator/facilitatorContext.ts";
import { requireProvider } from "../../../../facilitator/providers/requireProvider.ts";
import { readJsonBody } from "../../../../http/httpErrors.ts";
import { routeDoc } from "../../../../http/routeDocs.ts";
import { UintStringSchema } from "../../../../protocol/amount.ts";
import { TollgateError } from "../../../../protocol/errors.ts";
import { parseWire } from "../../../../protocol/parseWire.ts";
import {
  type UsageExhaustedRequest,
  UsageExhaustedRequestSchema,
  type UsageExhaustedResponse,
  UsageExhaustedResponseSchema,
  type UsageRecordsResponse,
  UsageRecordsResponseSchema,
  UsageRefSchema,
  type UsageRequest,
  UsageRequestSchema,
  type UsageResponse,
  UsageResponseSchema,
  type UsageSummary,
  UsageSummarySchema,
} from "../../../../protocol/subscriptions.ts";
import { findPlan, findSubscription, type IndexScope } from "../subscriptionRecords.ts";
import { createUsageProviderChecks, readChain, type UsageProviderChecks } from "./usageProviderChecks.ts";
import { findUsageByRefs, recordUsage, usageTotals, usageToWire } from "./usageRecords.ts";

export type UsageContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "gas" | "chainId" | "clock" | "recordEvent"
> & {
  subscriptionManager: Address;
};

const GetUsageQuerySchema = z.union([
  z.strictObject({ subscriptionId: UintStringSchema }),
  z.strictObject({
    refs: z
      .string()
      .max(6600)
      .transform((text) => text.split(","))
      .pipe(z.array(UsageRefSchema).min(1).max(100)),
  }),
]);

/** The usage routes, documented for the OpenAPI document (routeDocs.ts). */
const docs = {
  record: routeDoc({
    summary: "Record metered usage of subscriptions on the provider's plans, for batched on-chain charges",
    request: UsageRequestSchema,
    response: UsageResponseSchema,
    status: 202,
    errors: [400, 404, 413, 422, 429, 503],
  }),
  exhausted: routeDoc({
    summary: "Report that a gate refused a metered call at the subscription's cap (one event per cycle)",
    request: UsageExhaustedRequestSchema,
    response: UsageExhaustedResponseSchema,
    status: 202,
    errors: [400, 404, 413],
  }),
  read: routeDoc({
    summary:
      "Usage of one of the provider's subscriptions (`subscriptionId`: totals by status) or records by reference (`refs`)",
    response: z.union([UsageSummarySchema, UsageRecordsResponseSchema]),
    errors: [400, 404, 503],
  }),
};

export function mountUsageRoutes(app: Hono, ctx: UsageContext, deps: { onRecorded(): void }): void {
  const scope: IndexScope = { chainId: ctx.chainId, manager: ctx.subscriptionManager };
  const checks = createUsageProviderChecks(ctx, scope);

  app.post("/usage", docs.record, requireProvider(ctx), async (c) => {
    const provider = c.get("provider").address;
    const { records } = await readJsonBody(c, UsageRequestSchema);
    const body = await acceptUsage(ctx, scope, checks, provider, records, deps.onRecorded);
    return c.json(body, 202);
  });

  app.post("/usage/exhausted", docs.exhausted, requireProvider(ctx), async (c) => {
    const provider = c.get("provider").address;
    const body = await readJsonBody(c, UsageExhaustedRequestSchema);
    const reply: UsageExhaustedResponse = { recorded: await reportExhausted(ctx, scope, provider, body) };
    return c.json(reply, 202);
  });

  app.get("/usage", docs.read, requireProvider(ctx), async (c) => {
    const provider = c.get("provider").address;
    const query = parseWire(GetUsageQuerySchema, c.req.query(), {
      what: "query (give subscriptionId=<id> or refs=<a,b,…>)",
    });
    if ("refs" in query) {
      const rows = await findUsageByRefs(ctx.store, scope, provider, query.refs);
      const body: UsageRecordsResponse = { records: rows.map(usageToWire) };
      return c.json(body);
    }
    return c.json(await usageSummary(ctx, scope, provider, query.subscriptionId));
  });
}

/**
 * Records a provider's usage: every subscription must be on one of its plans and the facilitator
 * its operator; then the records are stored (durably, before the answer) and the settler woken.
 */
async function acceptUsage(
  ctx: UsageContext,
  scope: IndexScope,
  checks: UsageProviderChecks,
  provider: Address,
  records: UsageRequest["records"],
  onRecorded: () => void,
): Promise<UsageResponse> {
  const ids = [...new Set(records.map((r) => r.subscriptionId))];
  for (const id of ids) {
    const owner = await checks.providerOf(BigInt(id));
    if (owner === undefined) {
      throw new TollgateError("NotFound", `no subscription ${id}`, { details: { subscriptionId: id } });
    }
    if (owner !== provider) {
      throw new TollgateError("InvalidRequest", `subscription ${id} is not on one of your plans`, {
        details: { reason: "not_your_subscription", subscriptionId: id },
      });
    }
  }
  await checks.assertOperator(provider);
  const stored = await recordUsage(ctx.store, scope, provider, records);
  onRecorded();
  return { accepted: stored.map(({ row, duplicate }) => ({ ...usageToWire(row), duplicate })) };
}

/**
 * A gate refused a metered call of this provider's subscription at its cap. The first report of a
 * cycle (the subscription's indexed period) records `allowance.exhausted`, with `source: "gate"`;
 * later ones of the same cycle record nothing, so a flood of refused calls is one event (and one
 * webhook). Only the provider of the subscription's plan may report it. Nothing is read from the
 * chain and no gas is spent: the event says what the gate saw, beside the index's cap figures.
 * Answers whether this report recorded the event.
 */
async function reportExhausted(
  ctx: UsageContext,
  scope: IndexScope,
  provider: Address,
  body: UsageExhaustedRequest,
): Promise<boolean> {
  const subscriptionId = BigInt(body.subscriptionId);
  const sub = await findSubscription(ctx.store, scope, subscriptionId);
  if (sub === undefined) {
    throw new TollgateError("NotFound", `no subscription ${body.subscriptionId} is indexed`, {
      details: { subscriptionId: body.subscriptionId },
    });
  }
  if (getAddress(sub.provider) !== provider) {
    throw new TollgateError(
      "InvalidRequest",
      `subscription ${body.subscriptionId} is not on one of your plans`,
      {
        details: { reason: "not_your_subscription", subscriptionId: body.subscriptionId },
      },
    );
  }
  const plan = await findPlan(ctx.store, scope, sub.plan_id);
  return ctx.store.transaction(async (tx) => {
    const claimed = await tx.query(
      `INSERT INTO usage_exhaustion_reports (chain_id, manager, subscription_id, period_start, provider)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING subscription_id`,
      [scope.chainId, scope.manager.toLowerCase(), subscriptionId, sub.period_start, provider.toLowerCase()],
    );
    if (claimed.length === 0) return false;
    await ctx.recordEvent(tx, "allowance.exhausted", {
      subscriptionId: body.subscriptionId,
      planId: sub.plan_id.toString(),
      subscriber: getAddress(sub.subscriber),
      provider,
      payTo: provider,
      ...(plan === undefined ? {} : { token: getAddress(plan.token) }),
      source: "gate",
      ...(body.amount === undefined ? {} : { amount: body.amount }),
      overageUsed: sub.overage_used.toString(),
      maxOverage: sub.max_overage.toString(),
      periodStart: sub.period_start,
      periodEnd: sub.current_period_end,
    });
    return true;
  });
}

/** A provider's usage of one subscription: its cap figures from the chain, its records' totals by status. */
async function usageSummary(
  ctx: UsageContext,
  scope: IndexScope,
  provider: Address,
  subscriptionIdText: string,
): Promise<UsageSummary> {
  const subscriptionId = BigInt(subscriptionIdText);
  const sub = await readChain<{ subscriber: Address; maxOverage: bigint; overageUsed: bigint }>(() =>
    getSubscription(ctx.publicClient, { manager: ctx.subscriptionManager, subscriptionId }),
  );
  if (/^0x0{40}$/i.test(sub.subscriber)) {
    throw new TollgateError("NotFound", `no subscription ${subscriptionIdText}`);
  }
  const totals = await usageTotals(ctx.store, scope, provider, subscriptionId);
  const wire = (t: { count: number; amount: bigint }) => ({ count: t.count, amount: t.amount.toString() });
  const all = [totals.pending, totals.submitted, totals.settled, totals.failed];
  return {
    subscriptionId: subscriptionIdText,
    maxOverage: sub.maxOverage.toString(),
    overageUsed: sub.overageUsed.toString(),
    recorded: wire({
      count: all.reduce((n, t) => n + t.count, 0),
      amount: all.reduce((n, t) => n + t.amount, 0n),
    }),
    unsettled: wire({
      count: totals.pending.count + totals.submitted.count,
      amount: totals.pending.amount + totals.submitted.amount,
    }),
    settled: wire(totals.settled),
    failed: wire(totals.failed),
  };
}
