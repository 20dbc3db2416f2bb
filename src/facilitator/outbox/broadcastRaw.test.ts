import { HttpRequestError, RpcRequestError } from "viem";
import { describe, expect, it } from "vitest";
import { broadcastRaw } from "./broadcastRaw.ts";

function nodeSaying(message: string | undefined) {
  return {
    sendRawTransaction: async () => {
      if (message === undefined) return "0x" as const;
      throw new RpcRequestError({ body: {}, url: "http://node", error: { code: -32000, message } });
    },
  };
}

describe("broadcastRaw", () => {
  it("treats a transaction the node already has as sent", async () => {
    expect(await broadcastRaw(nodeSaying(undefined), "0x01")).toEqual({ kind: "sent" });
    expect(await broadcastRaw(nodeSaying("already known"), "0x01")).toEqual({ kind: "sent" });
  });

  it("reports a used nonce, so the caller looks for the receipt before calling it displaced", async () => {
    expect(await broadcastRaw(nodeSaying("nonce too low: next nonce 5, tx nonce 4"), "0x01")).toEqual({
      kind: "nonce-used",
    });
  });

  it("reports a refusal for good with the node's reason", async () => {
    const result = await broadcastRaw(nodeSaying("insufficient funds for gas * price + value"), "0x01");
    expect(result.kind).toBe("refused");
    expect(result.kind === "refused" && result.message).toMatch(/insufficient funds/);
  });

  it("reports a fee cap below the block's base fee as underpriced for now, not refused for good", async () => {
    // anvil's words; the transaction can be mined once the base fee falls under its fee cap.
    const result = await broadcastRaw(nodeSaying("max fee per gas less than block base fee"), "0x01");
    expect(result.kind).toBe("underpriced");
  });

  it("throws when the node cannot be reached: nothing is known of the transaction", async () => {
    const down = {
      sendRawTransaction: async () => {
        throw new HttpRequestError({ url: "http://node", details: "fetch failed" });
      },
    };
    await expect(broadcastRaw(down, "0x01")).rejects.toBeInstanceOf(HttpRequestError);
  });
});
