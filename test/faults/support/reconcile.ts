/**
 * The reconciliation after a fault run, against the chain: what the token, the SubscriptionManager and
 * the channels contract logged is the truth; the purchases the payers recorded, the facilitators' store
 * and the webhooks received are held to it. The webhooks a provider must receive are derived from the
 * chain's logs, not from the facilitators' own `events` table (a facilitator that lost an event there
 * would otherwise go unnoticed).
 */
import { type Address, type Hex, parseAbiItem } from "viem";
import { getTokenBalance } from "../../../src/chain/actions/usd/getTokenBalance.ts";
import { subscriptionManagerAbi } from "../../../src/chain/contracts/artifacts/SubscriptionManager.ts";
import { tollgateChannelsAbi } from "../../../src/chain/contracts/artifacts/TollgateChannels.ts";
import { WebhookEventTypeSchema } from "../../../src/protocol/webhook.ts";
import { type FaultStack, PLAN_PRICE } from "./faultStack.ts";
import type { Purchase } from "./workload.ts";

const authorizationUsed = parseAbiItem(
  "event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)",
);
const transfer = parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)");
const renewed = parseAbiItem(
  "event SubscriptionRenewed(uint256 indexed subscriptionId, uint256 indexed planId, uint256 amount, uint64 periodStart, uint64 periodEnd)",
);
const created = parseAbiItem(
  "event SubscriptionCreated(uint256 indexed subscriptionId, uint256 indexed planId, address indexed subscriber, uint256 amount, uint64 periodStart, uint64 periodEnd, uint256 maxOverage)",
);

export type Figures = {
  /** One-time payments settled on chain (authorizations used). */
  paymentsMade: number;
  purchasesServed: number;
  /** Subscription charges on chain (first periods and renewals). */
  subscriptionCharges: number;
  renewals: number;
  webhookEvents: number;
  /** Bad figures: each must be 0. */
  doubleCharges: number;
  lostPayments: number;
  lostWebhooks: number;
  ledgerMismatches: number;
  /**
   * Told paid (a proof) and never served: the gate that took the proof died before answering, and the
   * payer's re-sends were refused or never answered. Must be 0.
   */
  paidUnservedAfterGateKill: number;
  /** Answers 503 `PaymentInFlight` the payers waited out (a proof held by a killed gate's request). */
  proofInFlightWaits: number;
  /** Webhooks the provider must have received, derived from the chain's logs. */
  webhooksExpectedFromChain: number;
  /** Settled on chain while the payer was not told (it gave up first); readable by nonce. */
  settledPayerNotTold: number;
  details: string[];
};

export async function reconcile(
  stack: FaultStack,
  purchases: readonly Purchase[],
  balancesBefore: Map<string, bigint>,
): Promise<Figures> {
  const client = stack.devnet.publicClient;
  const details: string[] = [];
  const payerSet = new Set(stack.payers.map((p) => p.address.toLowerCase()));

  // Authorizations used on chain, by nonce.
  const used = await client.getLogs({
    address: stack.devnet.contracts.usd,
    event: authorizationUsed,
    fromBlock: 0n,
    toBlock: "latest",
  });
  const usedByNonce = new Map<string, number>();
  const usedByPayer = new Map<string, number>();
  for (const log of used) {
    const payer = log.args.authorizer!.toLowerCase();
    if (!payerSet.has(payer)) continue;
    usedByNonce.set(log.args.nonce!, (usedByNonce.get(log.args.nonce!) ?? 0) + 1);
    usedByPayer.set(payer, (usedByPayer.get(payer) ?? 0) + 1);
  }
  let doubleCharges = 0;
  for (const [nonce, count] of usedByNonce)
    if (count > 1) {
      doubleCharges += count - 1;
      details.push(`authorization ${nonce} used ${count} times`);
    }
  // Every transfer from a payer to the payee is one authorization: no transfer without one.
  const transfers = await client.getLogs({
    address: stack.devnet.contracts.usd,
    event: transfer,
    args: { to: stack.payTo.address },
    fromBlock: 0n,
    toBlock: "latest",
  });
  const transfersByPayer = new Map<string, number>();
  for (const log of transfers) {
    const from = log.args.from!.toLowerCase();
    if (payerSet.has(from)) transfersByPayer.set(from, (transfersByPayer.get(from) ?? 0) + 1);
  }
  for (const payer of payerSet) {
    const extra = (transfersByPayer.get(payer) ?? 0) - (usedByPayer.get(payer) ?? 0);
    if (extra !== 0) {
      doubleCharges += Math.abs(extra);
      details.push(
        `payer ${payer}: ${transfersByPayer.get(payer) ?? 0} transfers, ${usedByPayer.get(payer) ?? 0} authorizations`,
      );
    }
  }

  // Subscriptions: at most one charge per subscription and period.
  const renewals = await client.getLogs({
    address: stack.devnet.contracts.subscriptionManager,
    event: renewed,
    fromBlock: 0n,
    toBlock: "latest",
  });
  const creations = await client.getLogs({
    address: stack.devnet.contracts.subscriptionManager,
    event: created,
    fromBlock: 0n,
    toBlock: "latest",
  });
  const periods = new Map<string, Set<string>>();
  const chargesBySubscriber = new Map<string, number>();
  const subscriberOf = new Map<string, string>();
  for (const log of creations) {
    const id = log.args.subscriptionId!.toString();
    subscriberOf.set(id, log.args.subscriber!.toLowerCase());
    periods.set(id, new Set([log.args.periodStart!.toString()]));
    const who = log.args.subscriber!.toLowerCase();
    chargesBySubscriber.set(who, (chargesBySubscriber.get(who) ?? 0) + 1);
  }
  for (const log of renewals) {
    const id = log.args.subscriptionId!.toString();
    const seen = periods.get(id) ?? new Set<string>();
    const start = log.args.periodStart!.toString();
    if (seen.has(start)) {
      doubleCharges += 1;
      details.push(`subscription ${id} charged twice for the period starting ${start}`);
    }
    seen.add(start);
    periods.set(id, seen);
    const who = subscriberOf.get(id);
    if (who !== undefined) chargesBySubscriber.set(who, (chargesBySubscriber.get(who) ?? 0) + 1);
  }

  // Purchases: every proof a payer was told of, and every purchase served, is on chain.
  let lostPayments = 0;
  let paidUnservedAfterGateKill = 0;
  const told = new Set<string>();
  for (const p of purchases) {
    if (!p.paid || p.nonce === undefined) continue;
    told.add(p.nonce);
    if ((usedByNonce.get(p.nonce) ?? 0) === 0) {
      lostPayments += 1;
      details.push(`payer ${p.payer} holds a proof for ${p.nonce}, not settled on chain`);
    }
    if (!p.served) {
      paidUnservedAfterGateKill += 1;
      details.push(`paid, not served: ${p.nonce} (${p.refusal ?? p.error})`);
    }
  }
  const settledPayerNotTold = [...usedByNonce.keys()].filter((n) => !told.has(n)).length;

  // The facilitators' store against the chain: settled rows are exactly the used authorizations.
  const rows = await stack.query<{ nonce: string; status: string; payer: string; amount: string }>(
    "SELECT nonce, status, payer, amount::text AS amount FROM payments",
  );
  let ledgerMismatches = 0;
  const settledByPayer = new Map<string, bigint>();
  for (const row of rows) {
    const onChain = (usedByNonce.get(row.nonce) ?? 0) > 0;
    if ((row.status === "settled") !== onChain && payerSet.has(row.payer)) {
      // A row still open at the end is a payment the facilitators never finished.
      lostPayments += row.status === "settled" ? 1 : 0;
      ledgerMismatches += row.status === "settled" ? 0 : 1;
      details.push(`payments row ${row.nonce} is ${row.status}, on chain: ${onChain}`);
    }
    if (row.status === "settled")
      settledByPayer.set(row.payer, (settledByPayer.get(row.payer) ?? 0n) + BigInt(row.amount));
  }
  for (const nonce of usedByNonce.keys())
    if (!rows.some((r) => r.nonce === nonce)) {
      ledgerMismatches += 1;
      details.push(`authorization ${nonce} used on chain with no payments row`);
    }

  // Wallets against the ledgers: each payer's balance moved by its settled payments, each
  // subscriber's by its charges.
  const balance = (owner: Address) => getTokenBalance(client, { token: stack.devnet.contracts.usd, owner });
  for (const payer of stack.payers) {
    const moved = balancesBefore.get(payer.address.toLowerCase())! - (await balance(payer.address));
    const recorded = settledByPayer.get(payer.address.toLowerCase()) ?? 0n;
    if (moved !== recorded) {
      ledgerMismatches += 1;
      details.push(`payer ${payer.address}: wallet moved ${moved}, payments settled ${recorded}`);
    }
  }
  for (const subscriber of stack.subscribers) {
    const moved = balancesBefore.get(subscriber.address.toLowerCase())! - (await balance(subscriber.address));
    const charged = BigInt(chargesBySubscriber.get(subscriber.address.toLowerCase()) ?? 0) * PLAN_PRICE;
    if (moved !== charged) {
      ledgerMismatches += 1;
      details.push(`subscriber ${subscriber.address}: wallet moved ${moved}, charges ${charged}`);
    }
  }

  // Webhooks against the chain: every on-chain event of the provider's reached the receiver (at least
  // once), found by what the chain says (a nonce, a subscription period, a channel), not by event id.
  const expected = await webhooksExpectedFromChain(stack);
  const receivedKeys = new Set<string>();
  for (const w of stack.webhooks.received.values()) {
    const key = webhookKey(w.type, w.data);
    if (key !== undefined) receivedKeys.add(key);
  }
  let lostWebhooks = 0;
  for (const key of expected)
    if (!receivedKeys.has(key)) {
      lostWebhooks += 1;
      if (lostWebhooks <= 10) details.push(`webhook for ${key} (on chain) not received`);
    }
  // The event types with no log of their own (deductions, exhaustion, deprecations…) can only be held
  // to the facilitators' table.
  const events = await stack.query<{ id: string; type: string }>(
    "SELECT id::text AS id, type FROM events WHERE type = ANY($1) AND lower(data::text) LIKE $2",
    [WebhookEventTypeSchema.options, `%${stack.payTo.address.toLowerCase()}%`],
  );
  for (const event of events)
    if (!CHAIN_DERIVED.has(event.type) && !stack.webhooks.received.has(`evt_${event.id}`)) {
      lostWebhooks += 1;
      if (lostWebhooks <= 10) details.push(`webhook evt_${event.id} (${event.type}) not received`);
    }

  return {
    paymentsMade: usedByNonce.size,
    purchasesServed: purchases.filter((p) => p.served).length,
    subscriptionCharges: creations.length + renewals.length,
    renewals: renewals.length,
    webhookEvents: events.length,
    doubleCharges,
    lostPayments,
    lostWebhooks,
    ledgerMismatches,
    paidUnservedAfterGateKill,
    proofInFlightWaits: purchases.reduce((sum, p) => sum + p.inFlightWaits, 0),
    webhooksExpectedFromChain: expected.size,
    settledPayerNotTold,
    details,
  };
}

/** Webhook types whose expected deliveries are derived from chain logs (`webhooksExpectedFromChain`). */
const CHAIN_DERIVED = new Set([
  "payment.settled",
  "subscription.created",
  "subscription.renewed",
  "channel.opened",
  "channel.closed",
]);

/** What identifies a delivered webhook against the chain, for the types in `CHAIN_DERIVED`. */
function webhookKey(type: string, data: Record<string, unknown>): string | undefined {
  const text = (value: unknown) => String(value).toLowerCase();
  switch (type) {
    case "payment.settled":
      return `${type}:${text(data.nonce)}`;
    case "subscription.created":
    case "subscription.renewed":
      return `${type}:${text(data.subscriptionId)}:${text(data.periodStart)}`;
    case "channel.opened":
    case "channel.closed":
      return `${type}:${text(data.channelId)}`;
    default:
      return undefined;
  }
}

/**
 * The provider's webhooks the chain implies: `payment.settled` for each authorization used in a
 * transaction that moved the authorizer's tokens to the provider (outside the SubscriptionManager's
 * transactions), `subscription.created`/`renewed` for each period of its plans, `channel.opened` and
 * `channel.closed` for each channel paying it.
 */
async function webhooksExpectedFromChain(stack: FaultStack): Promise<Set<string>> {
  const client = stack.devnet.publicClient;
  const payTo = stack.payTo.address.toLowerCase();
  const range = { fromBlock: 0n, toBlock: "latest" } as const;
  const keys = new Set<string>();

  const managerTxs = new Set(
    (await client.getLogs({ address: stack.devnet.contracts.subscriptionManager, ...range })).map((l) =>
      l.transactionHash.toLowerCase(),
    ),
  );
  const paidIn = new Set<string>();
  for (const log of await client.getLogs({
    address: stack.devnet.contracts.usd,
    event: transfer,
    args: { to: stack.payTo.address },
    ...range,
  }))
    paidIn.add(`${log.transactionHash.toLowerCase()}:${log.args.from!.toLowerCase()}`);
  for (const log of await client.getLogs({
    address: stack.devnet.contracts.usd,
    event: authorizationUsed,
    ...range,
  })) {
    const tx = log.transactionHash.toLowerCase();
    if (managerTxs.has(tx) || !paidIn.has(`${tx}:${log.args.authorizer!.toLowerCase()}`)) continue;
    keys.add(`payment.settled:${log.args.nonce!.toLowerCase()}`);
  }

  const plans = new Set([stack.planId, stack.meteredPlanId]);
  for (const eventName of ["SubscriptionCreated", "SubscriptionRenewed"] as const) {
    const type = eventName === "SubscriptionCreated" ? "subscription.created" : "subscription.renewed";
    const logs = await client.getContractEvents({
      address: stack.devnet.contracts.subscriptionManager,
      abi: subscriptionManagerAbi,
      eventName,
      ...range,
    });
    for (const log of logs) {
      const args = log.args as { subscriptionId?: bigint; planId?: bigint; periodStart?: bigint };
      if (args.planId === undefined || !plans.has(args.planId)) continue;
      keys.add(`${type}:${args.subscriptionId}:${args.periodStart}`);
    }
  }

  const channels = stack.devnet.contracts.channels;
  if (channels !== undefined) {
    const ours = new Set<string>();
    for (const log of await client.getContractEvents({
      address: channels,
      abi: tollgateChannelsAbi,
      eventName: "ChannelOpened",
      ...range,
    })) {
      const args = log.args as { channelId?: Hex; payee?: Address };
      if (args.payee?.toLowerCase() !== payTo) continue;
      ours.add(args.channelId!.toLowerCase());
      keys.add(`channel.opened:${args.channelId!.toLowerCase()}`);
    }
    for (const log of await client.getContractEvents({
      address: channels,
      abi: tollgateChannelsAbi,
      eventName: "ChannelClosed",
      ...range,
    })) {
      const id = (log.args as { channelId?: Hex }).channelId?.toLowerCase();
      if (id !== undefined && ours.has(id)) keys.add(`channel.closed:${id}`);
    }
  }
  return keys;
}

/** Balances of every payer, subscriber, channel payer and agent, keyed by lower-case address. */
export async function balancesOf(stack: FaultStack): Promise<Map<string, bigint>> {
  const map = new Map<string, bigint>();
  for (const a of [
    ...stack.payers,
    ...stack.subscribers,
    ...stack.meteredSubscribers,
    ...stack.channelPayers,
    ...stack.agents,
  ])
    map.set(
      a.address.toLowerCase(),
      await getTokenBalance(stack.devnet.publicClient, {
        token: stack.devnet.contracts.usd,
        owner: a.address,
      }),
    );
  return map;
}

export type { Hex };
