import { decodeFunctionData } from "viem";
import { describe, expect, it } from "vitest";
import { batchSettlerAbi } from "../../contracts/artifacts/BatchSettler.ts";
import { settleGasLimit } from "./settle.ts";
import { settleCall } from "./settleCall.ts";

const settler = "0x00000000000000000000000000000000000000aa";
const token = "0x00000000000000000000000000000000000000bb";
const item = {
  authorization: {
    from: "0x00000000000000000000000000000000000000c1",
    to: "0x00000000000000000000000000000000000000c2",
    value: 10_000n,
    validAfter: 1n,
    validBefore: 2_000_000_000n,
    nonce: `0x${"11".repeat(32)}`,
  },
  signature: `0x${"22".repeat(65)}`,
} as const;

describe("settleCall", () => {
  it("encodes BatchSettler.settle for the settler with every item in order, at settleGasLimit", () => {
    const call = settleCall({
      settler,
      token,
      items: [item, { ...item, authorization: { ...item.authorization, value: 5n } }],
    });
    expect(call.to).toBe(settler);
    expect(call.gas).toBe(settleGasLimit(2));
    const decoded = decodeFunctionData({ abi: batchSettlerAbi, data: call.data });
    expect(decoded.functionName).toBe("settle");
    const [decodedToken, items] = decoded.args as readonly [
      string,
      readonly { value: bigint; nonce: string }[],
    ];
    expect(decodedToken.toLowerCase()).toBe(token);
    expect(items.map((i) => i.value)).toEqual([10_000n, 5n]);
    expect(items[0]?.nonce).toBe(item.authorization.nonce);
  });
});
