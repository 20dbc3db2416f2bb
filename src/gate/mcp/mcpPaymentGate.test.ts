import { describe, expect, it } from "vitest";
import { encodeJsonHeader, HeaderName } from "../../protocol/header.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import type { GateRequest } from "../gateRequest.ts";
import type { GateResult, PaymentGate } from "../paymentGate.ts";
import { mcpPaymentGate, toolResultOf } from "./mcpPaymentGate.ts";

const x402Required = {
  x402Version: 2,
  resource: { url: "http://seller.example/shout" },
  accepts: [
    {
      scheme: "exact",
      network: "eip155:31337",
      amount: "3000",
      asset: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
      payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      maxTimeoutSeconds: 300,
    },
  ],
};
const tollgateBody = { version: "1", error: "PaymentRequired", message: "payment required", accepts: [] };

/** A gate that records what it was asked and answers `result`. */
function recordingGate(result: GateResult): { gate: PaymentGate; seen: GateRequest[] } {
  const seen: GateRequest[] = [];
  return {
    seen,
    gate: async (request) => {
      seen.push(request);
      return result;
    },
  };
}

const passing: GateResult = {
  kind: "pass",
  headers: new Headers({
    [HeaderName.PaymentResponse]: encodeJsonHeader({
      success: true,
      transaction: `0x${"cd".repeat(32)}`,
      network: "eip155:31337",
      payer: "0x1",
    }),
    [HeaderName.Units]: "3",
    [HeaderName.OverageCharge]: "0",
  }),
  complete: async () => undefined,
};

describe("mcpPaymentGate", () => {
  it("passes the caller's address as the transport saw it, never one named in _meta", async () => {
    const { gate, seen } = recordingGate(passing);
    const gateCall = mcpPaymentGate(gate);
    await gateCall({
      path: "/shout",
      meta: { [McpMetaKey.TollgatePayment]: "cHJvb2Y=", remoteAddress: "6.6.6.6" },
      remoteAddress: "127.0.0.2",
      forwardedFor: "203.0.113.7",
    });
    await gateCall({ path: "/shout", meta: {} });
    expect(seen.map((r) => [r.remoteAddress, r.headers.get("x-forwarded-for")])).toEqual([
      ["127.0.0.2", "203.0.113.7"],
      [undefined, null],
    ]);
  });

  it("asks the gate about POST <path> with the credential from _meta as the header the gate reads", async () => {
    const { gate, seen } = recordingGate(passing);
    const gateCall = mcpPaymentGate(gate);
    await gateCall({ path: "/shout", meta: { [McpMetaKey.TollgatePayment]: "cHJvb2Y=" }, units: 2 });
    await gateCall({ path: "/shout", meta: { [McpMetaKey.TollgateSubscription]: { id: "9", auth: "tok" } } });
    await gateCall({ path: "/shout", meta: { [McpMetaKey.X402Payment]: { x402Version: 2 } } });
    expect(seen.map((r) => [r.method, r.url, r.units])).toEqual([
      ["POST", "/shout", 2],
      ["POST", "/shout", undefined],
      ["POST", "/shout", undefined],
    ]);
    expect(seen[0]!.headers.get(HeaderName.Payment)).toBe("cHJvb2Y=");
    expect(seen[1]!.headers.get(HeaderName.Subscription)).toBe("9");
    expect(seen[1]!.headers.get(HeaderName.SubscriptionAuth)).toBe("tok");
    expect(seen[2]!.headers.get(HeaderName.X402PaymentSignature)).toBe(encodeJsonHeader({ x402Version: 2 }));
  });

  it("carries the settlement and the metered usage of a pass into _meta", async () => {
    const outcome = await mcpPaymentGate(recordingGate(passing).gate)({ path: "/shout", meta: undefined });
    expect(outcome.kind).toBe("pass");
    if (outcome.kind !== "pass") return;
    expect(outcome.meta[McpMetaKey.X402PaymentResponse]).toMatchObject({ success: true, payer: "0x1" });
    expect(outcome.meta[McpMetaKey.TollgateUsage]).toEqual({ units: "3", overage: "0" });
  });

  it("refuses a malformed or doubled credential without asking the gate", async () => {
    const { gate, seen } = recordingGate(passing);
    const gateCall = mcpPaymentGate(gate);
    for (const meta of [
      "not an object",
      { [McpMetaKey.TollgatePayment]: ["x"] },
      { [McpMetaKey.X402Payment]: { big: "z".repeat(10_000) } },
      { [McpMetaKey.TollgateSubscription]: { id: "1", auth: "a", extra: true } },
      { [McpMetaKey.TollgatePayment]: "a", [McpMetaKey.X402Payment]: {} },
    ]) {
      const outcome = await gateCall({ path: "/shout", meta });
      expect(outcome.kind).toBe("respond");
      if (outcome.kind !== "respond") continue;
      expect(outcome.result.isError).toBe(true);
      expect(outcome.result.structuredContent).toMatchObject({ error: { code: "InvalidRequest" } });
    }
    expect(seen).toHaveLength(0);
  });

  it("hands a channel voucher to the gate as X-Tollgate-Channel and its receipt back in _meta", async () => {
    const { gate, seen } = recordingGate({
      kind: "pass",
      headers: new Headers({ "X-Tollgate-Channel-Receipt": "receipt-1" }),
      complete: async () => undefined,
    });
    const voucher = `0x${"11".repeat(32)}.3000.sig`;
    const outcome = await mcpPaymentGate(gate)({
      path: "/shout",
      meta: { [McpMetaKey.TollgateChannel]: voucher },
    });
    expect(seen[0]!.headers.get("X-Tollgate-Channel")).toBe(voucher);
    expect(outcome.kind === "pass" && outcome.meta[McpMetaKey.TollgateChannelReceipt]).toBe("receipt-1");
  });

  it("passes other _meta keys (a progress token) untouched", async () => {
    const { gate, seen } = recordingGate(passing);
    const outcome = await mcpPaymentGate(gate)({ path: "/shout", meta: { progressToken: 4 } });
    expect(outcome.kind).toBe("pass");
    expect(seen).toHaveLength(1);
  });
});

describe("toolResultOf", () => {
  it("makes a 402 x402's payment-required result, with Tollgate's body in _meta", async () => {
    const response = Response.json(tollgateBody, {
      status: 402,
      headers: { [HeaderName.X402PaymentRequired]: encodeJsonHeader(x402Required) },
    });
    const result = await toolResultOf(response);
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toEqual(x402Required);
    expect(JSON.parse(result.content[0]!.text)).toEqual(x402Required);
    expect(result._meta?.[McpMetaKey.TollgatePaymentRequired]).toEqual(tollgateBody);
  });

  it("uses Tollgate's body as the structured content when the gate sells no one-time payment", async () => {
    const result = await toolResultOf(Response.json(tollgateBody, { status: 402 }));
    expect(result.structuredContent).toEqual(tollgateBody);
  });

  it("keeps another refusal's status and Retry-After in _meta", async () => {
    const response = Response.json(
      { error: { code: "ChainUnavailable", message: "later" } },
      { status: 503, headers: { [HeaderName.RetryAfter]: "5" } },
    );
    const result = await toolResultOf(response);
    expect(result.structuredContent).toEqual({ error: { code: "ChainUnavailable", message: "later" } });
    expect(result._meta?.[McpMetaKey.TollgateError]).toEqual({ status: 503, retryAfter: 5 });
  });
});
