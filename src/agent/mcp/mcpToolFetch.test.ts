import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { decodeJsonHeader, encodeJsonHeader, HeaderName } from "../../protocol/header.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import { type McpToolCaller, mcpToolFetch } from "./mcpToolFetch.ts";

const x402Required = {
  x402Version: 2,
  error: "Payment required",
  resource: { url: "mcp://tool/forecast" },
  accepts: [
    {
      scheme: "exact",
      network: "eip155:31337",
      amount: "10000",
      asset: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
      payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      maxTimeoutSeconds: 60,
      extra: { name: "USD Coin", version: "2" },
    },
  ],
};

/** A server side that answers every call with `answer` and records what it was sent. */
function server(answer: (params: Parameters<McpToolCaller>[0]) => unknown) {
  const sent: Parameters<McpToolCaller>[0][] = [];
  const call: McpToolCaller = async (params) => {
    sent.push(params);
    return answer(params);
  };
  return { sent, fetch: mcpToolFetch(call, "forecast") };
}

const post = (headers: Record<string, string> = {}, body = '{"city":"Lisbon"}') =>
  new Request("http://127.0.0.1:1/mcp#forecast", { method: "POST", headers, body });

describe("mcpToolFetch", () => {
  it("turns an isError PaymentRequired result into a 402 with PAYMENT-REQUIRED", async () => {
    const { fetch } = server(() => ({
      isError: true,
      structuredContent: x402Required,
      content: [{ type: "text", text: JSON.stringify(x402Required) }],
    }));
    const response = await fetch(post());
    expect(response.status).toBe(402);
    expect(response.headers.get(HeaderName.X402PaymentRequired)).toBe(encodeJsonHeader(x402Required));
  });

  it("reads the PaymentRequired from content[0].text when there is no structured content", async () => {
    const { fetch } = server(() => ({
      isError: true,
      content: [{ type: "text", text: JSON.stringify(x402Required) }],
    }));
    expect((await fetch(post())).status).toBe(402);
  });

  it("accepts the older JSON-RPC error 402 with the requirements in error.data", async () => {
    const { fetch } = server(() => {
      throw new McpError(402, "Payment required", x402Required);
    });
    const response = await fetch(post());
    expect(response.status).toBe(402);
    expect(response.headers.has(HeaderName.X402PaymentRequired)).toBe(true);
  });

  it("sends the payment headers as _meta: proof as is, x402 payload decoded, subscription as { id, auth }", async () => {
    const { fetch, sent } = server(() => ({ content: [{ type: "text", text: "{}" }] }));
    const payload = { x402Version: 2, accepted: x402Required.accepts[0], payload: { signature: "0x01" } };
    await fetch(post({ [HeaderName.Payment]: "cHJvb2Y=" }));
    await fetch(post({ [HeaderName.X402PaymentSignature]: encodeJsonHeader(payload) }));
    await fetch(post({ [HeaderName.Subscription]: "7", [HeaderName.SubscriptionAuth]: "token" }));
    await fetch(post());
    expect(sent.map((s) => s._meta)).toEqual([
      { [McpMetaKey.TollgatePayment]: "cHJvb2Y=" },
      { [McpMetaKey.X402Payment]: payload },
      { [McpMetaKey.TollgateSubscription]: { id: "7", auth: "token" } },
      undefined,
    ]);
    expect(sent[0]!.arguments).toEqual({ city: "Lisbon" });
  });

  it("answers a result with 200, its text as body, and the settlement and usage as the gate's headers", async () => {
    const settlement = {
      success: true,
      transaction: `0x${"ab".repeat(32)}`,
      network: "eip155:31337",
      payer: "0x1",
    };
    const { fetch } = server(() => ({
      content: [{ type: "text", text: '{"forecast":"sunny"}' }],
      _meta: {
        [McpMetaKey.X402PaymentResponse]: settlement,
        [McpMetaKey.TollgateUsage]: { units: "2", overage: "1000" },
      },
    }));
    const response = await fetch(post({ [HeaderName.Payment]: "cHJvb2Y=" }));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ forecast: "sunny" });
    expect(decodeJsonHeader(response.headers.get(HeaderName.PaymentResponse) ?? "", z.unknown())).toEqual(
      settlement,
    );
    expect(response.headers.get(HeaderName.Units)).toBe("2");
    expect(response.headers.get(HeaderName.OverageCharge)).toBe("1000");
  });

  it("carries a channel voucher as _meta and the channel receipt back as its header", async () => {
    const { fetch, sent } = server(() => ({
      content: [{ type: "text", text: "{}" }],
      _meta: { [McpMetaKey.TollgateChannelReceipt]: "receipt-1" },
    }));
    const response = await fetch(post({ "X-Tollgate-Channel": "0xab.1.sig" }));
    expect(sent[0]!._meta).toEqual({ [McpMetaKey.TollgateChannel]: "0xab.1.sig" });
    expect(response.headers.get("X-Tollgate-Channel-Receipt")).toBe("receipt-1");
  });

  it("gives a tool error its stated status and Retry-After, and 502 when none is stated", async () => {
    const stated = server(() => ({
      isError: true,
      structuredContent: { error: { code: "RateLimited", message: "slow down" } },
      content: [{ type: "text", text: "slow down" }],
      _meta: { [McpMetaKey.TollgateError]: { status: 429, retryAfter: 3 } },
    }));
    const limited = await stated.fetch(post());
    expect(limited.status).toBe(429);
    expect(limited.headers.get(HeaderName.RetryAfter)).toBe("3");
    const bare = server(() => ({ isError: true, content: [{ type: "text", text: "boom" }] }));
    const failed = await bare.fetch(post());
    expect(failed.status).toBe(502);
    expect(await failed.json()).toEqual({ error: { code: "ToolError", message: "boom" } });
  });

  it("treats a reply that is not a tool result, or a payment-required body that is neither Tollgate's nor x402's, as the seller failing", async () => {
    expect((await server(() => "nonsense").fetch(post())).status).toBe(502);
    const bogus = server(() => ({
      isError: true,
      structuredContent: { x402Version: 2, accepts: "all your money" },
    }));
    expect((await bogus.fetch(post())).status).toBe(502);
  });

  it("refuses arguments that are not a JSON object before calling", async () => {
    const { fetch, sent } = server(() => ({ content: [] }));
    await expect(fetch(post({}, "[1,2]"))).rejects.toMatchObject({ code: "InvalidRequest" });
    await expect(fetch(post({}, "{"))).rejects.toMatchObject({ code: "InvalidRequest" });
    expect(sent).toHaveLength(0);
  });
});
