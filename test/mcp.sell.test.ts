/**
 * Selling over MCP (docs/mcp.md): a specialist's capabilities as MCP tools on its own app
 * (Streamable HTTP on loopback), called by the MCP SDK's standard client, every paid call checked by
 * the specialist's own gate over a real devnet and facilitator. The attacker's view: `_meta` is
 * untrusted, tools/list reveals nothing secret, a payment buys one call of one tool.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { McpMetaKey } from "../src/protocol/mcpPayment.ts";
import type { PaymentOption } from "../src/protocol/paymentRequired.ts";
import { createRedisReplayGuard } from "../src/store/createRedisReplayGuard.ts";
import { type AgentStack, sellerNamed, startAgentStack, usdBalanceOf } from "./support/agentStack.ts";
import { callTool, connectHttpClient, textOf, tollgateTerms } from "./support/mcpSupport.ts";

const TEXT =
  "The harbour reopened on Monday after a week of storms. Fishing boats returned before dawn. " +
  "Traders said the catch was excellent and prices fell.";

let stack: AgentStack;
/** A specialist of this suite: two paid tools and a free one, account 7 of the devnet. */
let shop: Specialist;
let failures = 0;
const closers: (() => Promise<void>)[] = [];

const upper = defineCapability({
  name: "upper",
  description: "Upper-cases a text.",
  input: z.object({ text: z.string().max(1000) }),
  output: z.object({ text: z.string() }),
  pricing: [{ type: "one-time", price: "0.003" }],
  handler: async ({ text }) => {
    if (text === "fail once" && failures++ === 0) throw new Error("disk on fire at /var/secret");
    return { text: text.toUpperCase() };
  },
});
const lower = defineCapability({
  name: "lower",
  description: "Lower-cases a text.",
  input: z.object({ text: z.string().max(1000) }),
  output: z.object({ text: z.string() }),
  pricing: [{ type: "one-time", price: "0.001" }],
  handler: async ({ text }) => ({ text: text.toLowerCase() }),
});
const ping = defineCapability({
  name: "ping",
  description: "Answers pong.",
  input: z.object({}),
  output: z.object({ pong: z.boolean() }),
  pricing: [{ type: "one-time", price: "0.001" }],
  handler: async () => ({ pong: true }),
});

beforeAll(async () => {
  stack = await startAgentStack();
  const account = stack.devnet.accounts[7]!;
  const replayGuard =
    process.env.REDIS_URL === undefined
      ? undefined
      : await createRedisReplayGuard({ url: process.env.REDIS_URL, prefix: `mcp-sell-${Date.now()}:` });
  shop = createSpecialist({
    name: "case-shop",
    account: account.account,
    capabilities: [upper, lower],
    facilitator: stack.tf.url,
    network: stack.devnet.network,
    token: stack.devnet.contracts.usd,
    ...(replayGuard === undefined ? {} : { replayGuard }),
    mcp: { freeTools: [ping] },
  });
  await shop.start();
}, 180_000);

afterAll(async () => {
  for (const close of closers) await close();
  await shop?.stop();
  await stack?.stop();
});

async function client(url: string): Promise<Client> {
  const c = await connectHttpClient(url);
  closers.push(() => c.close());
  return c;
}

async function freshPayer(usd = 5_000_000n): Promise<Payer> {
  const account = privateKeyToAccount(generatePrivateKey());
  await stack.devnet.fund(account.address, { usd });
  return createPayer({ account, network: stack.devnet.network, facilitator: stack.tf.url });
}

const mcpUrlOf = (specialist: Specialist) => specialist.manifest!.mcp!.url;
const exactOption = (accepts: PaymentOption[]) => {
  const option = accepts.find((o) => o.scheme === "exact");
  if (option === undefined) throw new Error("no exact option");
  return option;
};

describe("a specialist's tools over MCP Streamable HTTP", () => {
  it("lists every capability as a tool with its input schema and its price, without payment, and the manifest names the endpoint", async () => {
    const c = await client(mcpUrlOf(shop));
    expect(mcpUrlOf(shop)).toBe(`${shop.url}/mcp`);
    const { tools } = await c.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(["lower", "ping", "upper"]);
    const tool = tools.find((t) => t.name === "upper")!;
    expect(tool.description).toBe("Upper-cases a text. Price: 0.003 USDC per call, paid once per call.");
    expect(tool.inputSchema).toMatchObject({ type: "object", properties: { text: { type: "string" } } });
    expect(tool._meta?.[McpMetaKey.TollgatePricing]).toEqual([{ type: "one-time", amount: "3000" }]);
    // The free tool carries no price.
    expect(tools.find((t) => t.name === "ping")!._meta).toBeUndefined();
  });

  it("tools/list reveals nothing a buyer could not read in the signed manifest: no memo, key or secret", async () => {
    const summarizer = sellerNamed(stack, "summarizer");
    const c = await client(mcpUrlOf(summarizer.specialist));
    const listed = JSON.stringify(await c.listTools());
    expect(listed).not.toContain(summarizer.apiKey);
    expect(listed).not.toMatch(/memo|secret|apiKey|facilitator/i);
  });

  it("calls a free tool with the standard client unchanged", async () => {
    const c = await client(mcpUrlOf(shop));
    const result = await callTool(c, "ping", {});
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual({ pong: true });
    expect(JSON.parse(textOf(result))).toEqual({ pong: true });
  });

  it("answers an unpaid call of a paid tool with payment required: x402 terms as structured content and text, Tollgate's with plans in _meta", async () => {
    const summarizer = sellerNamed(stack, "summarizer");
    const c = await client(mcpUrlOf(summarizer.specialist));
    const result = await callTool(c, "summarize", { text: TEXT, sentences: 1 });
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({
      x402Version: 2,
      accepts: [
        {
          scheme: "exact",
          network: stack.devnet.network,
          amount: "20000",
          payTo: summarizer.account.address,
        },
      ],
    });
    expect(JSON.parse(textOf(result))).toEqual(result.structuredContent);
    const terms = tollgateTerms(result);
    expect(terms.error).toBe("PaymentRequired");
    expect(terms.accepts.map((o) => o.scheme)).toEqual(["exact", "subscription"]);
    expect(terms.accepts[1]!.tollgate?.planId).toBe(summarizer.plans.summarize!.planId);
  });

  it("serves a call paid with a Tollgate proof in _meta, returns the settlement in _meta, and moves the price on chain", async () => {
    const payer = await freshPayer();
    const c = await client(mcpUrlOf(shop));
    const before = await usdBalanceOf(stack, shop.payTo);
    const unpaid = await callTool(c, "upper", { text: "hello" });
    const receipt = await payer.pay(exactOption(tollgateTerms(unpaid).accepts));
    const paid = await callTool(
      c,
      "upper",
      { text: "hello" },
      { [McpMetaKey.TollgatePayment]: receipt.header },
    );
    expect(paid.isError).toBeFalsy();
    expect(paid.structuredContent).toEqual({ text: "HELLO" });
    expect(paid._meta?.[McpMetaKey.X402PaymentResponse]).toMatchObject({
      success: true,
      transaction: receipt.proof.tx,
      network: stack.devnet.network,
      payer: payer.address,
    });
    expect((await usdBalanceOf(stack, shop.payTo)) - before).toBe(3_000n);
  });

  it("refuses a replayed proof, over MCP and over HTTP alike: one payment buys one call", async () => {
    const payer = await freshPayer();
    const c = await client(mcpUrlOf(shop));
    const receipt = await payer.pay(
      exactOption(tollgateTerms(await callTool(c, "upper", { text: "a" })).accepts),
    );
    const meta = { [McpMetaKey.TollgatePayment]: receipt.header };
    expect((await callTool(c, "upper", { text: "a" }, meta)).isError).toBeFalsy();
    const replay = await callTool(c, "upper", { text: "a" }, meta);
    expect(replay.isError).toBe(true);
    expect(tollgateTerms(replay)).toMatchObject({ error: "InvalidPaymentProof" });
    expect(tollgateTerms(replay).message).toContain("already used");
    // The same proof over the HTTP route of the same capability: consumed once for both transports.
    const overHttp = await fetch(`${shop.url}/upper`, {
      method: "POST",
      headers: { "content-type": "application/json", "X-PAYMENT": receipt.header },
      body: JSON.stringify({ text: "a" }),
    });
    expect(overHttp.status).toBe(402);
  });

  it("a payment for one tool cannot buy another tool, nor a call of another seller", async () => {
    const payer = await freshPayer();
    const c = await client(mcpUrlOf(shop));
    // A proof for `lower` (0.001) shown on `upper`: the memo binds the path.
    const lowerTerms = tollgateTerms(await callTool(c, "lower", { text: "x" }));
    const receipt = await payer.pay(exactOption(lowerTerms.accepts));
    const wrongTool = await callTool(
      c,
      "upper",
      { text: "x" },
      { [McpMetaKey.TollgatePayment]: receipt.header },
    );
    expect(wrongTool.isError).toBe(true);
    expect(tollgateTerms(wrongTool).error).toBe("InvalidPaymentProof");
    // Shown to another seller's tool: another payee.
    const other = await client(mcpUrlOf(sellerNamed(stack, "linguist").specialist));
    const otherSeller = await callTool(
      other,
      "detect-language",
      { text: "bonjour tout le monde" },
      { [McpMetaKey.TollgatePayment]: receipt.header },
    );
    expect(otherSeller.isError).toBe(true);
    expect(tollgateTerms(otherSeller).error).toBe("InvalidPaymentProof");
    // Still good for the tool it paid for.
    const right = await callTool(c, "lower", { text: "X" }, { [McpMetaKey.TollgatePayment]: receipt.header });
    expect(right.structuredContent).toEqual({ text: "x" });
  });

  it("gives a proof back when the tool fails after payment, without telling internals; the same proof then serves", async () => {
    const payer = await freshPayer();
    const c = await client(mcpUrlOf(shop));
    const receipt = await payer.pay(
      exactOption(tollgateTerms(await callTool(c, "upper", { text: "fail once" })).accepts),
    );
    const meta = { [McpMetaKey.TollgatePayment]: receipt.header };
    const failed = await callTool(c, "upper", { text: "fail once" }, meta);
    expect(failed.isError).toBe(true);
    expect(failed.structuredContent).toEqual({
      error: { code: "Internal", message: "the capability failed" },
    });
    expect(failed._meta?.[McpMetaKey.TollgateError]).toEqual({ status: 500 });
    expect(JSON.stringify(failed)).not.toContain("secret");
    const retried = await callTool(c, "upper", { text: "fail once" }, meta);
    expect(retried.structuredContent).toEqual({ text: "FAIL ONCE" });
  });

  it("serves a subscriber's call on its subscription credential without a new payment", async () => {
    const summarizer = sellerNamed(stack, "summarizer");
    const payer = await freshPayer();
    const subscriptionId = await payer.subscribe({ planId: summarizer.plans.summarize!.planId });
    const c = await client(mcpUrlOf(summarizer.specialist));
    const headers = await payer.subscriptionHeaders(subscriptionId, summarizer.specialist.url!);
    const credential = { id: headers["X-Tollgate-Sub"]!, auth: headers["X-Tollgate-Sub-Auth"]! };
    const balance = await usdBalanceOf(stack, payer.address);
    for (let i = 0; i < 2; i++) {
      const result = await callTool(
        c,
        "summarize",
        { text: TEXT, sentences: 1 },
        { [McpMetaKey.TollgateSubscription]: credential },
      );
      expect(result.isError).toBeFalsy();
      expect(result.structuredContent).toHaveProperty("summary");
    }
    expect(await usdBalanceOf(stack, payer.address)).toBe(balance);
    // A token for another audience is refused: credentials are bound to this seller.
    const elsewhere = await payer.subscriptionHeaders(subscriptionId, "http://127.0.0.1:1");
    const refused = await callTool(
      c,
      "summarize",
      { text: TEXT },
      { [McpMetaKey.TollgateSubscription]: { id: credential.id, auth: elsewhere["X-Tollgate-Sub-Auth"]! } },
    );
    expect(tollgateTerms(refused).error).toBe("SubscriptionAuthInvalid");
  });

  it("counts a metered subscriber's units and tells them in _meta", async () => {
    const sentiment = sellerNamed(stack, "sentiment");
    const payer = await freshPayer();
    const subscriptionId = await payer.subscribe({
      planId: sentiment.plans.sentiment!.planId,
      maxOverage: "0.1",
    });
    const c = await client(mcpUrlOf(sentiment.specialist));
    const headers = await payer.subscriptionHeaders(subscriptionId, sentiment.specialist.url!);
    const result = await callTool(
      c,
      "sentiment",
      { text: "What a wonderful, happy day." },
      {
        [McpMetaKey.TollgateSubscription]: {
          id: headers["X-Tollgate-Sub"]!,
          auth: headers["X-Tollgate-Sub-Auth"]!,
        },
      },
    );
    expect(result.isError).toBeFalsy();
    expect(result._meta?.[McpMetaKey.TollgateUsage]).toEqual({ units: "1", overage: "0" });
  });
});

describe("_meta is untrusted input", () => {
  it("refuses a malformed credential as InvalidRequest, and two credentials at once, charging nothing", async () => {
    const c = await client(mcpUrlOf(shop));
    const cases: Record<string, unknown>[] = [
      { [McpMetaKey.TollgatePayment]: 42 },
      { [McpMetaKey.TollgatePayment]: "x".repeat(9000) },
      { [McpMetaKey.X402Payment]: { blob: "y".repeat(9000) } },
      { [McpMetaKey.TollgateSubscription]: { id: "1; DROP", auth: "t" } },
      { [McpMetaKey.TollgatePayment]: "abc", [McpMetaKey.TollgateSubscription]: { id: "1", auth: "t" } },
    ];
    for (const meta of cases) {
      const result = await callTool(c, "upper", { text: "a" }, meta);
      expect(result.isError).toBe(true);
      expect(result.structuredContent).toMatchObject({ error: { code: "InvalidRequest" } });
      expect(result._meta?.[McpMetaKey.TollgateError]).toEqual({ status: 400 });
    }
  });

  it("refuses garbage where a proof or an x402 payload belongs as an invalid payment, with fresh terms", async () => {
    const c = await client(mcpUrlOf(shop));
    const garbage = await callTool(
      c,
      "upper",
      { text: "a" },
      { [McpMetaKey.TollgatePayment]: "bm90IGEgcHJvb2Y=" },
    );
    expect(tollgateTerms(garbage).error).toBe("InvalidPaymentProof");
    const x402 = await callTool(
      c,
      "upper",
      { text: "a" },
      { [McpMetaKey.X402Payment]: { x402Version: 2, nonsense: true } },
    );
    expect(tollgateTerms(x402).error).toBe("InvalidPaymentProof");
  });

  it("refuses input that does not match the tool's schema before asking for payment", async () => {
    const c = await client(mcpUrlOf(shop));
    const result = await callTool(c, "upper", { text: 7 });
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ error: { code: "InvalidRequest" } });
    expect(result._meta?.[McpMetaKey.TollgatePaymentRequired]).toBeUndefined();
  });

  it("answers an unknown tool with a JSON-RPC error, and GET on the stateless endpoint with 405", async () => {
    const c = await client(mcpUrlOf(shop));
    await expect(callTool(c, "nope", {})).rejects.toThrow(/unknown tool/);
    const get = await fetch(mcpUrlOf(shop), { headers: { accept: "text/event-stream" } });
    expect(get.status).toBe(405);
    await get.body?.cancel();
  });

  it("refuses a capability served at the MCP path at construction", () => {
    const clash = defineCapability({ ...lower, name: "mcp" });
    expect(() =>
      createSpecialist({
        name: "clash",
        account: stack.devnet.accounts[8]!.account,
        capabilities: [clash],
        facilitator: stack.tf.url,
        network: stack.devnet.network,
        token: stack.devnet.contracts.usd,
      }),
    ).toThrow(TollgateError);
  });
});
