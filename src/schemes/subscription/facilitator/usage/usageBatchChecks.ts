/**
 * The checks a claimed usage batch passes before its transaction is queued (invariant 5 of
 * usageSettler.ts: one record cannot hold back the others). Records of a provider that has not made the
 * facilitator its operator, and records on a plan in a token the facilitator does not serve, fail alone
 * before anything is sent; a batch that would revert as a whole is split in halves until the records
 * that revert on their own are found. Records fail only while they still belong to the batch.
 */
import type { Logger } from "pino";
import type { Address } from "viem";
import { estimateDeductAllowanceMany } from "../../../../chain/actions/subscriptions/estimateDeductAllowanceMany.ts";
import { getIsOperator } from "../../../../chain/actions/subscriptions/getIsOperator.ts";
import { getPlan } from "../../../../chain/actions/subscriptions/getPlan.ts";
import { getSubscription } from "../../../../chain/actions/subscriptions/getSubscription.ts";
import { simulateDeductAllowanceMany } from "../../../../chain/actions/subscriptions/simulateDeductAllowanceMany.ts";
import type { FacilitatorContext } from "../../../../facilitator/facilitatorContext.ts";
import type { TollgateError } from "../../../../protocol/errors.ts";
import type { Queryable } from "../../../../store/store.ts";
import { isChainRefusal } from "../chainRefusal.ts";
import { toManagerError } from "../managerErrors.ts";
import { failBatchRecords } from "./usageBatchRecords.ts";
import type { UsageRow } from "./usageRecords.ts";

export type UsageBatchCheckDeps = {
  store: Queryable;
  client: FacilitatorContext["publicClient"];
  chainId: number;
  manager: Address;
  /** The facilitator's gas account, the operator that deducts. */
  operator: Address;
  /** Tokens this facilitator serves, in lower case. */
  knownTokens: ReadonlySet<string>;
  log: Logger;
};

export type UsageBatchChecks = ReturnType<typeof createUsageBatchChecks>;

/** The checks bound to one settler's chain, manager and operator. */
export function createUsageBatchChecks(deps: UsageBatchCheckDeps) {
  return {
    deduction: (rows: readonly UsageRow[]) => deduction(deps, rows),
    dropNonOperators: (batchId: number, rows: UsageRow[]) => dropNonOperators(deps, batchId, rows),
    dropUnknownTokens: (batchId: number, rows: UsageRow[]) => dropUnknownTokens(deps, batchId, rows),
    estimate: (rows: readonly UsageRow[]) => estimate(deps, rows),
    revertingAlone: (rows: readonly UsageRow[]) => revertingAlone(deps, rows),
    refusalOf: (rows: readonly UsageRow[], fallback: Error) => refusalOf(deps, rows, fallback),
    failReverting: (batchId: number, rows: readonly UsageRow[]) => failReverting(deps, batchId, rows),
  };
}

/** The arguments of `deductAllowanceMany(rows)`. */
function deduction(deps: UsageBatchCheckDeps, rows: readonly UsageRow[]) {
  return {
    manager: deps.manager,
    subscriptionIds: rows.map((r) => r.subscription_id),
    amounts: rows.map((r) => r.amount),
    refs: rows.map((r) => r.chain_ref),
  };
}

/** Records of providers that have not made the facilitator their operator fail here, alone. */
async function dropNonOperators(
  deps: UsageBatchCheckDeps,
  batchId: number,
  rows: UsageRow[],
): Promise<UsageRow[]> {
  const { client, manager, operator } = deps;
  const providers = [...new Set(rows.map((r) => r.provider))];
  const allowed = new Set<string>();
  for (const provider of providers) {
    if (await getIsOperator(client, { manager, provider, operator })) allowed.add(provider);
  }
  const refused = rows.filter((r) => !allowed.has(r.provider));
  await failBatchRecords(
    deps.store,
    batchId,
    refused.map((r) => r.id),
    "InvalidRequest",
    `the facilitator (${operator}) is not an operator of the provider: call setOperator on the SubscriptionManager`,
  );
  return rows.filter((r) => allowed.has(r.provider));
}

/** The plan token of each subscription: from the index, else read from the chain. */
async function tokensOf(deps: UsageBatchCheckDeps, ids: readonly bigint[]): Promise<Map<string, string>> {
  const { client, manager } = deps;
  const found = new Map<string, string>();
  const rows = await deps.store.query<{ subscription_id: string; token: string }>(
    `SELECT s.subscription_id::text AS subscription_id, p.token FROM subscriptions s
       JOIN plans p ON p.chain_id = s.chain_id AND p.manager = s.manager AND p.plan_id = s.plan_id
       WHERE s.chain_id = $1 AND s.manager = $2 AND s.subscription_id = ANY($3::numeric[])`,
    [deps.chainId, manager.toLowerCase(), ids.map(String)],
  );
  for (const row of rows) found.set(String(row.subscription_id), row.token.toLowerCase());
  for (const id of ids) {
    if (found.has(id.toString())) continue;
    const sub = await getSubscription(client, { manager, subscriptionId: id });
    const plan = await getPlan(client, { manager, planId: sub.planId });
    found.set(id.toString(), plan.token.toLowerCase());
  }
  return found;
}

/** Records on plans in a token this facilitator does not serve fail here, alone, unsent. */
async function dropUnknownTokens(
  deps: UsageBatchCheckDeps,
  batchId: number,
  rows: UsageRow[],
): Promise<UsageRow[]> {
  if (rows.length === 0) return rows;
  const tokens = await tokensOf(deps, [...new Set(rows.map((r) => r.subscription_id))]);
  const known = (r: UsageRow) => deps.knownTokens.has(tokens.get(r.subscription_id.toString()) ?? "");
  await failBatchRecords(
    deps.store,
    batchId,
    rows.filter((r) => !known(r)).map((r) => r.id),
    "InvalidRequest",
    "the subscription's plan is in a token this facilitator does not settle",
  );
  return rows.filter(known);
}

/** The gas `deductAllowanceMany(rows)` needs, or undefined when the chain refuses it. */
async function estimate(deps: UsageBatchCheckDeps, rows: readonly UsageRow[]): Promise<bigint | undefined> {
  try {
    return await estimateDeductAllowanceMany(deps.client, {
      ...deduction(deps, rows),
      account: deps.operator,
    });
  } catch (error) {
    if (isChainRefusal(error)) return undefined;
    throw error;
  }
}

/** The records among `rows` (a batch known to revert) that revert on their own, found by halving. */
async function revertingAlone(deps: UsageBatchCheckDeps, rows: readonly UsageRow[]): Promise<UsageRow[]> {
  if (rows.length === 1) return [...rows];
  const half = Math.ceil(rows.length / 2);
  const out: UsageRow[] = [];
  for (const part of [rows.slice(0, half), rows.slice(half)]) {
    if ((await estimate(deps, part)) === undefined) out.push(...(await revertingAlone(deps, part)));
  }
  return out;
}

/** Why `rows` revert, decoded from a simulation. */
async function refusalOf(
  deps: UsageBatchCheckDeps,
  rows: readonly UsageRow[],
  fallback: Error,
): Promise<TollgateError> {
  return simulateDeductAllowanceMany(deps.client, { ...deduction(deps, rows), account: deps.operator }).then(
    () => toManagerError(fallback),
    (error: unknown) => toManagerError(error),
  );
}

/** Fails records that revert alone, each with the reason its own simulation gives. */
async function failReverting(
  deps: UsageBatchCheckDeps,
  batchId: number,
  rows: readonly UsageRow[],
): Promise<void> {
  for (const row of rows) {
    const refusal = await refusalOf(deps, [row], new Error("the deduction reverts on chain"));
    await failBatchRecords(
      deps.store,
      batchId,
      [row.id],
      refusal.code,
      `the deduction reverts on chain on its own: ${refusal.message}`,
    );
    deps.log.warn(
      { record: row.id, code: refusal.code },
      "usage record reverts alone; failed without the rest",
    );
  }
}
