/**
 * x402 "Transport: MCP" interop (docs/mcp.md), with the published packages over a real devnet and
 * Tollgate's facilitator:
 * (a) an x402-MCP client built from the MCP SDK's client and `@x402/core` + `@x402/evm` pays a
 *     Tollgate specialist's tool with `_meta["x402/payment"]`, once: a replay is refused;
 * (b) Tollgate's agent pays an MCP server Tollgate did not write — the SDK's `McpServer` on
 *     `@hono/mcp`'s transport, checking payments with `@x402/core`'s resource server against
 *     `<facilitator>/x402` — through its budget; and one answering the older JSON-RPC error 402.
 */
import { randomUUID } from "node:crypto";
import { StreamableHTTPTransport } from "@hono/mcp";
import type { ToolMessage } from "@langchain/core/messages";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { CallToolRequestSchema, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";
import { x402Client } from "@x402/core/client";
import { HTTPFacilitatorClient } from "@x402/core/http";
import { x402ResourceServer } from "@x402/core/server";
import type { PaymentPayload, PaymentRequired, PaymentRequirements } from "@x402/core/types";
import { ExactEvmScheme as ExactEvmClientScheme } from "@x402/evm/exact/client";
import { ExactEvmScheme as ExactEvmServerScheme } from "@x402/evm/exact/server";
import { Hono } from "hono";
import type { Address, PrivateKeyAccount } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createMcpConnections } from "../src/agent/mcp/mcpConnections.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { McpMetaKey } from "../src/protocol/mcpPayment.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { callTool, connectHttpClient, type ToolResult } from "./support/mcpSupport.ts";

const NETWORK = "eip155:31337" as const;
const PRICE = 10_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let specialist: Specialist;
let thirdParty: RunningServer;
const connections = createMcpConnections();
const closers: (() => Promise<void>)[] = [];

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function freshAccount(usd: bigint): Promise<PrivateKeyAccount> {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd });
  return account;
}

/** The standard x402 client for `account`, allowed to pay the devnet token. */
function standardClient(account: PrivateKeyAccount): x402Client {
  return new x402Client()
    .register(NETWORK, new ExactEvmClientScheme(account))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: devnet.contracts.usd }] });
}

/**
 * An MCP server with one paid tool, written only with the MCP SDK, `@hono/mcp` and `@x402/core`, as
 * the x402 MCP transport describes: payment required as an `isError` result with `PaymentRequired`,
 * the payload read from `_meta["x402/payment"]`, verified and settled through the facilitator, the
 * settlement in the result's `_meta["x402/payment-response"]`. `/legacy` answers unpaid calls with
 * the older JSON-RPC error 402 instead.
 */
async function startThirdPartyServer(payTo: Address): Promise<RunningServer> {
  const resourceServer = new x402ResourceServer(
    new HTTPFacilitatorClient({ url: `${tf.url}/x402` }),
  ).register(NETWORK, new ExactEvmServerScheme());
  await resourceServer.initialize();
  const resource = {
    url: "mcp://tool/forecast",
    description: "tomorrow's weather",
    mimeType: "application/json",
  };
  const requirements = () =>
    resourceServer.buildPaymentRequirements({
      scheme: "exact",
      network: NETWORK,
      payTo,
      price: {
        amount: PRICE.toString(),
        asset: devnet.contracts.usd,
        extra: { name: devnet.token.name, version: devnet.token.version },
      },
      maxTimeoutSeconds: 120,
    });
  /** The tool's answer for a call with `payment` (or none): payment required, or the forecast and its settlement. */
  const serve = async (
    payment: unknown,
    city: string,
  ): Promise<{ required: PaymentRequired } | { result: Record<string, unknown> }> => {
    const accepts = await requirements();
    if (payment === undefined) {
      return {
        required: await resourceServer.createPaymentRequiredResponse(accepts, resource, "Payment required"),
      };
    }
    const payload = payment as PaymentPayload;
    const matched: PaymentRequirements | undefined = resourceServer.findMatchingRequirements(
      accepts,
      payload,
    );
    const verified = matched === undefined ? undefined : await resourceServer.verifyPayment(payload, matched);
    if (matched === undefined || verified?.isValid !== true) {
      return {
        required: await resourceServer.createPaymentRequiredResponse(
          accepts,
          resource,
          verified?.invalidReason ?? "no matching requirements",
        ),
      };
    }
    const settled = await resourceServer.settlePayment(payload, matched);
    if (!settled.success) {
      return {
        required: await resourceServer.createPaymentRequiredResponse(accepts, resource, "Settlement failed"),
      };
    }
    return {
      result: {
        content: [{ type: "text", text: JSON.stringify({ city, forecast: "sunny" }) }],
        _meta: { "x402/payment-response": settled },
      },
    };
  };

  const mcp = new McpServer({ name: "weather-co", version: "0.1.0" });
  mcp.registerTool(
    "forecast",
    { description: "Tomorrow's weather for a city. Costs 0.01 USDC.", inputSchema: { city: z.string() } },
    async ({ city }, extra) => {
      const answer = await serve(extra._meta?.["x402/payment"], city);
      if ("result" in answer) return answer.result as never;
      return {
        isError: true,
        structuredContent: answer.required as unknown as Record<string, unknown>,
        content: [{ type: "text", text: JSON.stringify(answer.required) }],
      };
    },
  );
  const transport = new StreamableHTTPTransport({ sessionIdGenerator: () => randomUUID() });
  await mcp.connect(transport);

  const legacy = () => {
    const server = new Server({ name: "weather-legacy", version: "0.1.0" }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: [
        {
          name: "legacy-forecast",
          description: "Tomorrow's weather (x402 over JSON-RPC errors).",
          inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        },
      ],
    }));
    server.setRequestHandler(CallToolRequestSchema, async (request) => {
      const city = String((request.params.arguments as { city?: unknown } | undefined)?.city ?? "");
      const answer = await serve(request.params._meta?.["x402/payment"], city);
      if ("required" in answer) throw new McpError(402, "Payment required", answer.required);
      return answer.result as never;
    });
    return server;
  };

  const app = new Hono();
  app.all("/mcp", (c) => transport.handleRequest(c) as Promise<Response>);
  app.post("/legacy", async (c) => {
    const server = legacy();
    const t = new WebStandardStreamableHTTPServerTransport({ enableJsonResponse: true });
    await server.connect(t);
    return t.handleRequest(c.req.raw);
  });
  return serveApp(app);
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
  tf = await startTestFacilitator(devnet);
  specialist = createSpecialist({
    name: "shouter",
    account: devnet.accounts[2]!.account,
    capabilities: [
      defineCapability({
        name: "shout",
        description: "Upper-cases a text.",
        input: z.object({ text: z.string().max(200) }),
        output: z.object({ text: z.string() }),
        pricing: [{ type: "one-time", amount: PRICE }],
        handler: async ({ text }) => ({ text: text.toUpperCase() }),
      }),
    ],
    facilitator: tf.url,
    network: NETWORK,
    token: devnet.contracts.usd,
  });
  await specialist.start();
  thirdParty = await startThirdPartyServer(devnet.accounts[3]!.address);
}, 120_000);

afterAll(async () => {
  for (const close of closers) await close();
  await connections.close();
  await thirdParty?.close();
  await specialist?.stop();
  await tf?.stop();
  await devnet?.stop();
});

describe("an x402-MCP client paying a Tollgate specialist", () => {
  it("reads the x402 terms from the standard result, pays with _meta[x402/payment], gets the settlement, and a replay is refused", async () => {
    const client = await connectHttpClient(specialist.manifest!.mcp!.url);
    closers.push(() => client.close());
    const account = await freshAccount(50_000n);
    const sellerBefore = await balanceOf(specialist.payTo);
    const unpaid = await callTool(client, "shout", { text: "hi" });
    expect(unpaid.isError).toBe(true);
    // The x402 client reads structuredContent as the spec says (content[0].text holds the same JSON).
    const required = unpaid.structuredContent as unknown as PaymentRequired;
    expect(required.x402Version).toBe(2);
    const payload = await standardClient(account).createPaymentPayload(required);
    const paid = await callTool(client, "shout", { text: "hi" }, { [McpMetaKey.X402Payment]: payload });
    expect(paid.isError).toBeFalsy();
    expect(paid.structuredContent).toEqual({ text: "HI" });
    const settlement = paid._meta?.[McpMetaKey.X402PaymentResponse] as {
      success: boolean;
      transaction: string;
    };
    expect(settlement).toMatchObject({ success: true, network: NETWORK, payer: account.address });
    const receipt = await devnet.publicClient.getTransactionReceipt({
      hash: settlement.transaction as `0x${string}`,
    });
    expect(receipt.status).toBe("success");
    expect(await balanceOf(account.address)).toBe(50_000n - PRICE);
    expect((await balanceOf(specialist.payTo)) - sellerBefore).toBe(PRICE);

    const replay: ToolResult = await callTool(
      client,
      "shout",
      { text: "hi" },
      { [McpMetaKey.X402Payment]: payload },
    );
    expect(replay.isError).toBe(true);
    expect((replay.structuredContent as unknown as PaymentRequired).error).toBe(
      "invalid_exact_evm_nonce_already_used",
    );
    expect(await balanceOf(account.address)).toBe(50_000n - PRICE);
  });
});

describe("Tollgate's agent paying an x402 MCP server it did not write", () => {
  async function agent(name: string, limits: { total: bigint }) {
    const account = await freshAccount(1_000_000n);
    const payer = createPayer({ account, network: NETWORK, facilitator: tf.url });
    const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await budget.setLimits(name, limits);
    const tools = await discoverTools({
      agent: name,
      payer,
      budget,
      mcpServers: [`${thirdParty.url}/mcp`, `${thirdParty.url}/legacy`],
      mcpConnections: connections,
    });
    const call = async (tool: string, args: Record<string, unknown>) => {
      const found = tools.find((t) => t.tool.name === tool)!;
      const message = (await found.tool.invoke({
        type: "tool_call",
        id: randomUUID(),
        name: tool,
        args,
      })) as ToolMessage;
      return { content: String(message.content), receipt: message.artifact as PaidToolReceipt };
    };
    return { account, budget, tools, call };
  }

  it("pays the isError payment-required result through its budget and records the receipt", async () => {
    const buyer = await agent("mcp-x402-buyer", { total: 1_000_000n });
    expect(buyer.tools.map((t) => t.tool.name).sort()).toEqual(["forecast", "legacy-forecast"]);
    const sellerBefore = await balanceOf(devnet.accounts[3]!.address);
    const { content, receipt } = await buyer.call("forecast", { city: "Lisbon" });
    expect(JSON.parse(content)).toEqual({ city: "Lisbon", forecast: "sunny" });
    expect(receipt).toMatchObject({
      tool: "forecast",
      mode: "one-time",
      amount: "0.01",
      provider: devnet.accounts[3]!.address,
    });
    expect((await buyer.budget.report("mcp-x402-buyer")).spent.total).toBe(PRICE);
    expect(await balanceOf(buyer.account.address)).toBe(1_000_000n - PRICE);
    expect((await balanceOf(devnet.accounts[3]!.address)) - sellerBefore).toBe(PRICE);
  });

  it("pays a server that answers with the older JSON-RPC error 402", async () => {
    const buyer = await agent("mcp-x402-legacy", { total: 1_000_000n });
    const { content, receipt } = await buyer.call("legacy-forecast", { city: "Porto" });
    expect(JSON.parse(content)).toEqual({ city: "Porto", forecast: "sunny" });
    expect(receipt).toMatchObject({ mode: "one-time", amount: "0.01" });
    expect(await balanceOf(buyer.account.address)).toBe(1_000_000n - PRICE);
  });

  it("refuses to pay past its budget, and nothing moves", async () => {
    const buyer = await agent("mcp-x402-poor", { total: 5_000n });
    const { content, receipt } = await buyer.call("forecast", { city: "Faro" });
    expect(content).toMatch(/^ERROR BudgetExceeded/);
    expect(receipt).toMatchObject({ amount: "0", paid: false });
    expect(await balanceOf(buyer.account.address)).toBe(1_000_000n);
  });
});
