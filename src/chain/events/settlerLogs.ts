/**
 * BatchSettler's events (`Settled`, `SettleFailed`, `Deferred`) read from a receipt's logs by their
 * topics, without viem's generic decoder.
 *
 * Why: viem's `parseEventLogs` finds each log's event by hashing the ABI's event signatures again for
 * every log and checksums every address it decodes (a keccak each, in JavaScript): ~0.3 ms for the
 * receipt of a one-payment batch and ~6 ms for one of 100 on a 2-core machine, on the facilitator's
 * thread, for every batch. The event selectors are computed once here and addresses come back
 * lower-case (every reader of these events compares them lower-cased). A property test holds the
 * result to viem's decoding of the same logs.
 */
import { decodeAbiParameters, type Hex, toEventSelector } from "viem";
import { batchSettlerAbi } from "../contracts/artifacts/BatchSettler.ts";

/** One BatchSettler event; addresses are lower-case 0x-hex. */
export type SettlerLog =
  | { eventName: "Settled"; address: Hex; token: Hex; from: Hex; nonce: Hex }
  | { eventName: "SettleFailed"; address: Hex; token: Hex; from: Hex; nonce: Hex; reason: Hex }
  | { eventName: "Deferred"; address: Hex; token: Hex; firstIndex: bigint; count: bigint };

/** The parts of a log this reads (viem's `Log` has them). */
export type RawLog = { address: string; topics: readonly (Hex | null)[] | readonly Hex[]; data: Hex };

const eventSelector = (name: "Settled" | "SettleFailed" | "Deferred"): Hex => {
  const item = batchSettlerAbi.find((x) => x.type === "event" && x.name === name);
  if (item === undefined) throw new Error(`BatchSettler's ABI has no ${name} event`);
  return toEventSelector(item as Parameters<typeof toEventSelector>[0]);
};

const SETTLED = eventSelector("Settled");
const SETTLE_FAILED = eventSelector("SettleFailed");
const DEFERRED = eventSelector("Deferred");

const WORD = /^0x[0-9a-fA-F]{64}$/;
const ADDRESS_WORD = /^0x0{24}[0-9a-fA-F]{40}$/;

/**
 * The BatchSettler events among `logs`, in log order. A log that is not one of them, or does not have
 * the event's shape (topic count, words, data), is skipped, as viem's `parseEventLogs` skips logs it
 * cannot decode. Filter by `address` yourself: anyone can deploy a contract that emits these events.
 */
export function readSettlerLogs(logs: readonly RawLog[]): SettlerLog[] {
  const events: SettlerLog[] = [];
  for (const log of logs) {
    const event = readSettlerLog(log);
    if (event !== undefined) events.push(event);
  }
  return events;
}

function readSettlerLog(log: RawLog): SettlerLog | undefined {
  const [selector, first, second, third] = log.topics;
  const address = log.address.toLowerCase() as Hex;
  if (selector === SETTLED || selector === SETTLE_FAILED) {
    if (log.topics.length !== 4 || !isAddressWord(first) || !isAddressWord(second) || !isWord(third)) {
      return undefined;
    }
    const token = addressOf(first);
    const from = addressOf(second);
    const nonce = third.toLowerCase() as Hex;
    if (selector === SETTLED) return { eventName: "Settled", address, token, from, nonce };
    const reason = decodeData(log.data, [{ type: "bytes" }]);
    if (reason === undefined) return undefined;
    return { eventName: "SettleFailed", address, token, from, nonce, reason: reason[0] as Hex };
  }
  if (selector === DEFERRED) {
    if (log.topics.length !== 2 || !isAddressWord(first)) return undefined;
    const values = decodeData(log.data, [{ type: "uint256" }, { type: "uint256" }]);
    if (values === undefined) return undefined;
    return {
      eventName: "Deferred",
      address,
      token: addressOf(first),
      firstIndex: values[0] as bigint,
      count: values[1] as bigint,
    };
  }
  return undefined;
}

const isWord = (topic: Hex | null | undefined): topic is Hex => typeof topic === "string" && WORD.test(topic);
const isAddressWord = (topic: Hex | null | undefined): topic is Hex =>
  typeof topic === "string" && ADDRESS_WORD.test(topic);
const addressOf = (word: Hex): Hex => `0x${word.slice(26).toLowerCase()}`;

function decodeData(data: Hex, types: readonly { type: string }[]): readonly unknown[] | undefined {
  try {
    return decodeAbiParameters(types, data);
  } catch {
    return undefined;
  }
}
