/**
 * Everything one subscription has pulled from its subscriber, read from the SubscriptionManager's own
 * events (the facilitator's event feed is per provider, and a snapshot of `GET /subscriptions/:id`
 * cannot see overage deducted in a period that a renewal has since reset). Every pull emits one of:
 * `SubscriptionCreated` (first period), `SubscriptionRenewed` (a renewal, including the period a
 * resume charges: that transaction emits `SubscriptionRenewed` and then `SubscriptionResumed` with
 * `charged`, one pull counted once, from the former) and `AllowanceDeducted` (overage). Failed pulls
 * (`RenewalFailed`, `DeductionFailed`) move nothing.
 */
import type { Address, PublicClient } from "viem";
import { pageLogRanges } from "../../../chain/actions/getLogsPaged.ts";
import { subscriptionManagerAbi } from "../../../chain/contracts/artifacts/SubscriptionManager.ts";

/** What the reader needs of a viem public client. */
export type SubscriptionEventReader = Pick<PublicClient, "getContractEvents" | "getBlockNumber">;

export type SubscriptionPulls = {
  /** Sum of every amount pulled, all periods. */
  total: bigint;
  renewals: number;
  deductions: number;
  /** True once a `RenewalFailed` was seen after the last successful pull of a period. */
  pastDue: boolean;
  cancelled: boolean;
  /** The latest block read. */
  toBlock: bigint;
};

/**
 * Sums the pulls of `subscriptionId` since `fromBlock`. Deterministic for a given `toBlock`, so a
 * watcher may repeat it.
 */
export async function readSubscriptionPulls(
  client: SubscriptionEventReader,
  p: { manager: Address; subscriptionId: bigint; fromBlock: bigint },
): Promise<SubscriptionPulls> {
  const toBlock = await client.getBlockNumber();
  const args = { subscriptionId: p.subscriptionId };
  // Providers cap a log query's block range: each event is read in pages they accept.
  const paged = <T>(read: (fromBlock: bigint, toBlock: bigint) => Promise<T[]>) =>
    pageLogRanges(client, { fromBlock: p.fromBlock, toBlock }, read);
  const on = { address: p.manager, abi: subscriptionManagerAbi, args } as const;
  const [created, renewed, resumed, deducted, failed, cancelled] = await Promise.all([
    paged((fromBlock, toBlock) =>
      client.getContractEvents({ ...on, eventName: "SubscriptionCreated", fromBlock, toBlock }),
    ),
    paged((fromBlock, toBlock) =>
      client.getContractEvents({ ...on, eventName: "SubscriptionRenewed", fromBlock, toBlock }),
    ),
    paged((fromBlock, toBlock) =>
      client.getContractEvents({ ...on, eventName: "SubscriptionResumed", fromBlock, toBlock }),
    ),
    paged((fromBlock, toBlock) =>
      client.getContractEvents({ ...on, eventName: "AllowanceDeducted", fromBlock, toBlock }),
    ),
    paged((fromBlock, toBlock) =>
      client.getContractEvents({ ...on, eventName: "RenewalFailed", fromBlock, toBlock }),
    ),
    paged((fromBlock, toBlock) =>
      client.getContractEvents({ ...on, eventName: "SubscriptionCancelled", fromBlock, toBlock }),
    ),
  ]);
  let total = 0n;
  for (const e of created) total += e.args.amount ?? 0n;
  for (const e of renewed) total += e.args.amount ?? 0n;
  for (const e of deducted) total += e.args.amount ?? 0n;
  const lastPull = [...renewed, ...resumed, ...created].reduce(
    (latest, e) => (e.blockNumber !== null && e.blockNumber > latest ? e.blockNumber : latest),
    -1n,
  );
  const pastDue = failed.some((e) => e.blockNumber !== null && e.blockNumber > lastPull);
  return {
    total,
    renewals: renewed.length,
    deductions: deducted.length,
    pastDue,
    cancelled: cancelled.length > 0,
    toBlock,
  };
}
