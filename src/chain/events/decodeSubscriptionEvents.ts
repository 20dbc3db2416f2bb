import { type Log, parseEventLogs } from "viem";
import { subscriptionManagerAbi } from "../contracts/artifacts/SubscriptionManager.ts";

/**
 * Decodes the SubscriptionManager events among `logs` (a receipt's logs or `getLogs` output), skipping
 * logs of other contracts or events. Each result has `eventName` and typed `args`.
 *
 * @example
 * for (const event of decodeSubscriptionEvents(receipt.logs)) {
 *   if (event.eventName === "RenewalFailed") markPastDue(event.args.subscriptionId);
 * }
 */
export function decodeSubscriptionEvents(logs: Log[]) {
  return parseEventLogs({ abi: subscriptionManagerAbi, logs });
}

/** The SubscriptionManager's event ABI items, for `getLogs`/`watchContractEvent` filters. */
export const subscriptionEventsAbi = subscriptionManagerAbi.filter((item) => item.type === "event");

/** The id of the plan a createPlan receipt created. */
export function getPlanIdFromReceipt(receipt: { logs: Log[] }): bigint {
  const event = parseEventLogs({
    abi: subscriptionManagerAbi,
    logs: receipt.logs,
    eventName: "PlanCreated",
  })[0];
  if (event === undefined) throw new Error("the receipt holds no PlanCreated event");
  return event.args.planId;
}

/** The id of the subscription a subscribe/subscribeFor receipt created. */
export function getSubscriptionIdFromReceipt(receipt: { logs: Log[] }): bigint {
  const event = parseEventLogs({
    abi: subscriptionManagerAbi,
    logs: receipt.logs,
    eventName: "SubscriptionCreated",
  })[0];
  if (event === undefined) throw new Error("the receipt holds no SubscriptionCreated event");
  return event.args.subscriptionId;
}
