import fc from "fast-check";
import { encodeAbiParameters, encodeEventTopics, getAddress, type Hex, type Log, parseEventLogs } from "viem";
import { describe, expect, it } from "vitest";
import { address, hexOf, uint256 } from "../../../test/support/transferArbitraries.ts";
import { batchSettlerAbi } from "../contracts/artifacts/BatchSettler.ts";
import { fiatTokenV2_2Abi } from "../contracts/circle-usdc/FiatTokenV2_2.ts";
import { readSettlerLogs } from "./settlerLogs.ts";

const word = fc.uint8Array({ minLength: 32, maxLength: 32 }).map(hexOf);
/** An address as a node may spell it: checksummed or lower-case. */
const spelled = address.chain((a) => fc.constantFrom(a, getAddress(a)));

const asLog = (address: string, topics: readonly unknown[], data: Hex): Log =>
  ({ address, topics, data, blockNumber: 1n, logIndex: 0, removed: false }) as unknown as Log;

const settled = fc
  .record({ at: spelled, token: address, from: address, nonce: word })
  .map(({ at, token, from, nonce }) =>
    asLog(
      at,
      encodeEventTopics({ abi: batchSettlerAbi, eventName: "Settled", args: { token, from, nonce } }),
      "0x",
    ),
  );
const settleFailed = fc
  .record({
    at: spelled,
    token: address,
    from: address,
    nonce: word,
    reason: fc.uint8Array({ maxLength: 300 }),
  })
  .map(({ at, token, from, nonce, reason }) =>
    asLog(
      at,
      encodeEventTopics({ abi: batchSettlerAbi, eventName: "SettleFailed", args: { token, from, nonce } }),
      encodeAbiParameters([{ type: "bytes" }], [hexOf(reason)]),
    ),
  );
const deferred = fc
  .record({ at: spelled, token: address, firstIndex: uint256, count: uint256 })
  .map(({ at, token, firstIndex, count }) =>
    asLog(
      at,
      encodeEventTopics({ abi: batchSettlerAbi, eventName: "Deferred", args: { token } }),
      encodeAbiParameters([{ type: "uint256" }, { type: "uint256" }], [firstIndex, count]),
    ),
  );
/** The token's own events in the same receipt, and logs of nothing known. */
const transfer = fc
  .record({ at: spelled, from: address, to: address, value: uint256 })
  .map(({ at, from, to, value }) =>
    asLog(
      at,
      encodeEventTopics({ abi: fiatTokenV2_2Abi, eventName: "Transfer", args: { from, to } }),
      encodeAbiParameters([{ type: "uint256" }], [value]),
    ),
  );
const unknown = fc
  .record({ at: spelled, topics: fc.array(word, { maxLength: 4 }), data: fc.uint8Array({ maxLength: 64 }) })
  .map(({ at, topics, data }) => asLog(at, topics, hexOf(data)));

/** viem's decoding of the same logs, spelled as `readSettlerLogs` spells it (lower-case addresses). */
function viaViem(logs: Log[]) {
  return parseEventLogs({ abi: batchSettlerAbi, logs }).map((event) => {
    const address = event.address.toLowerCase();
    if (event.eventName === "Deferred") {
      const { token, firstIndex, count } = event.args;
      return { eventName: event.eventName, address, token: token.toLowerCase(), firstIndex, count };
    }
    const base = {
      eventName: event.eventName,
      address,
      token: event.args.token.toLowerCase(),
      from: event.args.from.toLowerCase(),
      nonce: event.args.nonce,
    };
    return event.eventName === "SettleFailed" ? { ...base, reason: event.args.reason } : base;
  });
}

describe("readSettlerLogs", () => {
  it("reads a receipt's settler events as viem decodes them, skipping every other log", () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(settled, settleFailed, deferred, transfer, unknown), { maxLength: 30 }),
        (logs) => {
          expect(readSettlerLogs(logs)).toEqual(viaViem(logs));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("skips a settler event that does not have the event's shape", () => {
    const token = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
    const from = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
    const nonce = `0x${"ab".repeat(32)}` as Hex;
    const topics = encodeEventTopics({
      abi: batchSettlerAbi,
      eventName: "Settled",
      args: { token, from, nonce },
    });
    const good = asLog(token, topics, "0x");
    expect(readSettlerLogs([good])).toEqual([{ eventName: "Settled", address: token, token, from, nonce }]);
    // A topic missing, an address word with its high bytes set, a short word, undecodable data.
    const dirty = `0x${"ff".repeat(12)}${from.slice(2)}` as Hex;
    const failedTopics = encodeEventTopics({
      abi: batchSettlerAbi,
      eventName: "SettleFailed",
      args: { token, from, nonce },
    });
    const bad = [
      asLog(token, topics.slice(0, 3), "0x"),
      asLog(token, [topics[0]!, topics[1]!, dirty, topics[3]!], "0x"),
      asLog(token, [topics[0]!, topics[1]!, topics[2]!, "0xabcd"], "0x"),
      asLog(token, failedTopics, "0x1234"),
    ];
    expect(readSettlerLogs(bad)).toEqual([]);
  });
});
