/**
 * `postUsage` (docs/gate.md): hands metered charges to the facilitator's `POST /usage`, which
 * records them durably (idempotent on each record's `ref`, per provider) and settles them on chain in
 * batches with `SubscriptionManager.deductAllowanceMany`. Authenticated with the provider's API key
 * (`POST /providers`, docs/subscriptions.md).
 */
import type { FacilitatorClient, RequestOptions } from "../../../../http/facilitatorClient.ts";
import { TollgateError } from "../../../../protocol/errors.ts";
import {
  UsageExhaustedResponseSchema,
  type UsageRecord,
  type UsageRecordsResponse,
  UsageRecordsResponseSchema,
  type UsageResponse,
  UsageResponseSchema,
} from "../../../../protocol/subscriptions.ts";

/** One charge: what the facilitator deducts from the subscription's allowance, and its idempotency key. */
export type UsageRecordInput = { subscriptionId: bigint; amount: bigint; ref: string };

/** Records per request; larger batches are split. */
export const MAX_USAGE_RECORDS_PER_REQUEST = 500;
/** Refs per `GET /usage?refs=` lookup. */
export const MAX_USAGE_REFS_PER_LOOKUP = 100;

/**
 * Sends the records; resolves, once the facilitator has stored every one of them, with each record as
 * the facilitator holds it (a record sent before may already be `settled` or `failed`). Throws the
 * facilitator's `TollgateError` (`Unauthorized` for a bad key, `InvalidRequest` for a provider that
 * has not made the facilitator its operator, `ChainUnavailable` when unreachable, …); records are
 * idempotent on `ref`, so the caller retries the same records after any failure.
 *
 * @example
 * await postUsage(facilitator, { apiKey: env.TOLLGATE_PROVIDER_KEY,
 *   records: [{ subscriptionId: 7n, amount: 3_000n, ref: "order-1234" }] });
 */
export async function postUsage(
  client: Pick<FacilitatorClient, "request">,
  params: { apiKey: string; records: readonly UsageRecordInput[] },
  options: RequestOptions = {},
): Promise<UsageResponse["accepted"]> {
  for (const record of params.records) {
    if (record.amount <= 0n) {
      throw new TollgateError("InvalidAmount", "a usage record's amount must be positive", {
        details: { ref: record.ref },
      });
    }
  }
  const accepted: UsageResponse["accepted"] = [];
  for (let start = 0; start < params.records.length; start += MAX_USAGE_RECORDS_PER_REQUEST) {
    const records = params.records.slice(start, start + MAX_USAGE_RECORDS_PER_REQUEST).map((record) => ({
      subscriptionId: record.subscriptionId.toString(),
      amount: record.amount.toString(),
      ref: record.ref,
    }));
    const reply = await client.request("POST", "/usage", UsageResponseSchema, {
      ...options,
      headers: { ...options.headers, authorization: `Bearer ${params.apiKey}` },
      body: { records },
    });
    accepted.push(...reply.accepted);
  }
  return accepted;
}

/**
 * `POST /usage/exhausted`: tells the facilitator that the gate refused a metered call of this
 * subscription at its cap, so that it emits `allowance.exhausted` (once per subscription per cycle).
 * Resolves with whether this report was the cycle's first.
 */
export async function reportAllowanceExhausted(
  client: Pick<FacilitatorClient, "request">,
  params: { apiKey: string; subscriptionId: bigint; amount?: bigint | undefined },
  options: RequestOptions = {},
): Promise<boolean> {
  const reply = await client.request("POST", "/usage/exhausted", UsageExhaustedResponseSchema, {
    ...options,
    headers: { ...options.headers, authorization: `Bearer ${params.apiKey}` },
    body: {
      subscriptionId: params.subscriptionId.toString(),
      ...(params.amount === undefined || params.amount <= 0n ? {} : { amount: params.amount.toString() }),
    },
  });
  return reply.recorded;
}

/** `GET /usage?refs=…`: the provider's records with these refs as the facilitator holds them now. */
export async function getUsageRecords(
  client: Pick<FacilitatorClient, "request">,
  params: { apiKey: string; refs: readonly string[] },
  options: RequestOptions = {},
): Promise<UsageRecord[]> {
  const records: UsageRecord[] = [];
  for (let start = 0; start < params.refs.length; start += MAX_USAGE_REFS_PER_LOOKUP) {
    const refs = params.refs.slice(start, start + MAX_USAGE_REFS_PER_LOOKUP);
    const reply: UsageRecordsResponse = await client.request(
      "GET",
      `/usage?refs=${refs.map(encodeURIComponent).join(",")}`,
      UsageRecordsResponseSchema,
      { ...options, headers: { ...options.headers, authorization: `Bearer ${params.apiKey}` } },
    );
    records.push(...reply.records);
  }
  return records;
}
