/**
 * A reseller's sales over MCP, on a real devnet: admission keeps the same promises as over HTTP. Terms
 * keep the sale reserved for the memos they name; a paid call whose brief failed keeps its sale for the
 * re-sent proof, while another buyer asking meanwhile is refused unpaid; and a paid call refused for the
 * reseller's budget leaves its proof unused, says so, and the same proof is served once re-sent.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBriefReseller } from "../agents/createBriefReseller.ts";
import { sentimentScorer } from "../agents/sentimentScorer.ts";
import { summarizer } from "../agents/summarizer.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type CallAllowance, withCallAllowance } from "../src/agent/callAllowance.ts";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createMcpConnections } from "../src/agent/mcp/mcpConnections.ts";
import { type Capability, defineCapability } from "../src/agent/tools/capability.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { type Clock, systemClock } from "../src/protocol/clock.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { McpMetaKey } from "../src/protocol/mcpPayment.ts";
import type { PaymentOption } from "../src/protocol/paymentRequired.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { callTool, connectHttpClient, type ToolResult, tollgateTerms } from "./support/mcpSupport.ts";

let devnet: Devnet;
let tf: TestFacilitator;
const specialists: Specialist[] = [];
const closers: (() => Promise<void>)[] = [];
const connections = createMcpConnections();

const SUMMARY = 20_000n;
const SENTIMENT = 10_000n;
const BRIEF = 40_000n;
const TEXT = "The trains were late again. Everyone missed the meeting. It was a terrible morning.";

const summarize = { ...summarizer, pricing: [{ type: "one-time", price: "0.02" }] } as Capability;

async function start(name: string, accountIndex: number, capabilities: Capability[], clock?: Clock) {
  const specialist = createSpecialist({
    name,
    account: devnet.accounts[accountIndex]!.account,
    capabilities,
    facilitator: tf.url,
    network: devnet.network,
    token: devnet.contracts.usd,
    ...(clock === undefined ? {} : { clock }),
  });
  await specialist.start();
  specialists.push(specialist);
  return specialist;
}

/** A reseller of briefs at 0.04 whose budget holds `total`, buying from `supplierUrls` over HTTP. */
async function startReseller(
  name: string,
  accountIndex: number,
  supplierUrls: string[],
  total: bigint,
  clock?: Clock,
) {
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total });
  const supplies = await discoverTools({
    urls: supplierUrls,
    agent: name,
    payer: createPayer({
      account: devnet.accounts[accountIndex]!.account,
      network: devnet.network,
      facilitator: tf.url,
    }),
    budget,
  });
  const buy = (tool: string) => (input: Record<string, unknown>, allowance?: CallAllowance) =>
    supplies
      .find((t) => t.capability.name === tool)!
      .tool.invoke(input, allowance === undefined ? undefined : withCallAllowance(allowance));
  const brief = createBriefReseller(
    { summarize: buy("summarize"), sentiment: buy("sentiment") },
    { price: "0.04", admission: { budget, agent: name } },
  );
  const specialist = await start(name, accountIndex, [brief as unknown as Capability], clock);
  return { specialist, budget, mcpUrl: specialist.manifest!.mcp!.url };
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 8 });
  tf = await startTestFacilitator(devnet);
  await start("summarizer", 2, [summarize]);
});

afterAll(async () => {
  for (const close of closers) await close();
  await connections.close();
  for (const s of specialists) await s.stop();
  await tf?.stop();
  await devnet?.stop();
});

const balanceOf = (owner: `0x${string}`) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function client(url: string): Promise<Client> {
  const c = await connectHttpClient(url);
  closers.push(() => c.close());
  return c;
}

async function fundedAccount() {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 1_000_000n });
  return account;
}

const exactOption = (accepts: PaymentOption[]) => {
  const option = accepts.find((o) => o.scheme === "exact");
  if (option === undefined) throw new Error("no exact option");
  return option;
};

const errorOf = (result: ToolResult) =>
  (result.structuredContent as { error?: { code?: string; message?: string } } | undefined)?.error;

describe("a reseller selling over MCP", () => {
  it("keeps a paid sale whose brief failed admitted for the re-sent proof, while another buyer asking meanwhile is refused unpaid", async () => {
    let sentimentDown = true;
    const toggled = await start("toggled-sentiment", 3, [
      defineCapability({
        ...sentimentScorer,
        pricing: [{ type: "one-time", price: "0.01" }],
        handler: async (input, context) => {
          if (sentimentDown) throw new TollgateError("Internal", "the sentiment model is reloading");
          return sentimentScorer.handler(input, context);
        },
      }) as unknown as Capability,
    ]);
    const summarizerUrl = specialists.find((s) => s.name === "summarizer")!.url!;
    // Room for one sale beside a failed one's spend: 0.03 spent on the failed try leaves 0.04 — a
    // second sale's worth, unless the failed sale is still held for its buyer's re-sent proof.
    const reseller = await startReseller("mcp-reseller-resend", 4, [summarizerUrl, toggled.url!], 70_000n);
    const other = await client(reseller.mcpUrl);
    let otherAnswer: ToolResult | undefined;
    // The buyer's payer waits before re-sending its proof: meanwhile another buyer asks (over MCP,
    // unpaid), then the supplier recovers. Deterministic: no timing decides who gets the budget.
    const wait = async () => {
      if (otherAnswer !== undefined) return;
      otherAnswer = await callTool(other, "brief", { text: "Another text to brief. It is short." });
      sentimentDown = false;
    };
    const account = await fundedAccount();
    const buyerBudget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await buyerBudget.setLimits("mcp-brief-buyer", { total: 1_000_000n });
    const [brief] = await discoverTools({
      mcpServers: [reseller.mcpUrl],
      mcpConnections: connections,
      agent: "mcp-brief-buyer",
      payer: createPayer({ account, network: devnet.network, facilitator: tf.url }),
      budget: buyerBudget,
      wait,
    });
    const before = await balanceOf(account.address);
    const toggledBefore = await balanceOf(toggled.payTo);

    const message = (await brief!.tool.invoke({
      type: "tool_call",
      id: "mcp-resend-1",
      name: "brief",
      args: { text: TEXT },
    })) as { content: unknown; artifact: Record<string, unknown> };

    // The other buyer was refused before paying: the failed sale kept its reservation.
    expect(otherAnswer?.isError).toBe(true);
    expect(errorOf(otherAnswer!)?.code).toBe("SaleNotAdmitted");
    expect(errorOf(otherAnswer!)?.message).toMatch(/nothing was charged/);
    expect(otherAnswer?._meta?.[McpMetaKey.TollgateError]).toEqual({ status: 503, retryAfter: 5 });
    // The re-sent proof found its sale: served, paid once; the supplier's proof was redeemed.
    expect(message.artifact.error).toBeUndefined();
    expect(JSON.parse(String(message.content))).toMatchObject({ sources: ["summarize", "sentiment"] });
    expect(before - (await balanceOf(account.address))).toBe(BRIEF);
    expect((await balanceOf(toggled.payTo)) - toggledBefore).toBe(SENTIMENT);
    const report = await reseller.budget.report("mcp-reseller-resend");
    expect([report.spent.total, report.reserved.total]).toEqual([SUMMARY + SENTIMENT, 0n]);
  });

  it("refuses a paid call its budget cannot take without using the proof, says so, and serves the same proof re-sent", async () => {
    const summarizerUrl = specialists.find((s) => s.name === "summarizer")!.url!;
    const sentiment = await start("sentiment-once", 5, [
      defineCapability({
        ...sentimentScorer,
        pricing: [{ type: "one-time", price: "0.01" }],
      }) as unknown as Capability,
    ]);
    // The reseller's clock moves past an offer's 120 s at will; its budget takes exactly one sale.
    let offset = 0;
    const clock: Clock = { now: () => Date.now() + offset };
    const reseller = await startReseller(
      "mcp-reseller-one",
      6,
      [summarizerUrl, sentiment.url!],
      BRIEF,
      clock,
    );
    const first = await client(reseller.mcpUrl);
    const second = await client(reseller.mcpUrl);
    const buyer = await fundedAccount();
    const payer = createPayer({ account: buyer, network: devnet.network, facilitator: tf.url });
    const before = await balanceOf(buyer.address);

    // The buyer's terms reserve the one sale; it pays, but its offer lapses before the proof arrives,
    // and another buyer's terms take the budget meanwhile.
    const terms = await callTool(first, "brief", { text: TEXT });
    const receipt = await payer.pay(exactOption(tollgateTerms(terms).accepts));
    offset += 121_000;
    expect(tollgateTerms(await callTool(second, "brief", { text: TEXT })).accepts.length).toBeGreaterThan(0);
    const meta = { [McpMetaKey.TollgatePayment]: receipt.header };

    // Refused before the gate, over MCP and over HTTP alike: the proof is not used, and the buyer is
    // told to send it again (not that nothing was charged: its payment moved).
    const refused = await callTool(first, "brief", { text: TEXT }, meta);
    expect(refused.isError).toBe(true);
    expect(errorOf(refused)?.code).toBe("SaleNotAdmitted");
    expect(errorOf(refused)?.message).toMatch(
      /the payment sent with this request was not used: send the same proof again later$/,
    );
    expect(errorOf(refused)?.message).not.toMatch(/nothing was charged/);
    expect(refused._meta?.[McpMetaKey.TollgateError]).toEqual({ status: 503, retryAfter: 5 });
    const overHttp = await fetch(`${reseller.specialist.url}/brief`, {
      method: "POST",
      headers: { "content-type": "application/json", "X-PAYMENT": receipt.header },
      body: JSON.stringify({ text: TEXT }),
    });
    expect(overHttp.status).toBe(503);
    expect(await overHttp.json()).toMatchObject({
      error: {
        code: "SaleNotAdmitted",
        message: expect.stringMatching(/was not used: send the same proof again/),
      },
    });

    // The other buyer's offer lapses: the same proof, re-sent, is served — it had not been consumed.
    offset += 121_000;
    const served = await callTool(first, "brief", { text: TEXT }, meta);
    expect(served.isError, JSON.stringify(served)).toBeFalsy();
    expect(served.structuredContent).toMatchObject({ sources: ["summarize", "sentiment"] });
    expect(before - (await balanceOf(buyer.address))).toBe(BRIEF);
    const report = await reseller.budget.report("mcp-reseller-one");
    expect([report.spent.total, report.reserved.total]).toEqual([SUMMARY + SENTIMENT, 0n]);
  });
});
