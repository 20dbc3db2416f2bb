/**
 * The agent runtime over real services: specialists serve capabilities behind the gate and register
 * with the market; an agent discovers them as paid tools and spends from its budget ledger.
 */
import pino from "pino";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { languageDetector } from "../agents/languageDetector.ts";
import { summarizer } from "../agents/summarizer.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createSpendCollector } from "../src/agent/spendReport.ts";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import type { RunningServer } from "../src/facilitator/createFacilitator.ts";
import { serveMarket } from "../src/market/createMarket.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let store: Store;
let market: RunningServer;
const specialists: Specialist[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  tf = await startTestFacilitator(devnet);
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  market = await serveMarket({ store, clock: systemClock, logger: pino({ level: "silent" }) });
  const sellers = [
    { name: "summarizer", account: devnet.accounts[2]!, capabilities: [summarizer] },
    { name: "linguist", account: devnet.accounts[3]!, capabilities: [languageDetector] },
    // A seller whose handler fails after the gate accepted the payment (its own supply ran out).
    {
      name: "broken",
      account: devnet.accounts[4]!,
      capabilities: [
        defineCapability({
          name: "forecast",
          description: "Forecast the weather for a city.",
          input: z.object({ city: z.string() }),
          output: z.object({ forecast: z.string() }),
          pricing: [{ type: "one-time", price: "0.01" }],
          handler: async () => {
            throw new TollgateError("Internal", "the weather feed this seller buys from is down");
          },
        }),
      ],
    },
  ];
  for (const s of sellers) {
    const specialist = createSpecialist({
      name: s.name,
      account: s.account.account,
      capabilities: s.capabilities,
      facilitator: tf.url,
      network: devnet.network,
      token: devnet.contracts.usd,
      market: market.url,
    });
    await specialist.start();
    specialists.push(specialist);
  }
});

afterAll(async () => {
  for (const s of specialists) await s.stop();
  await market?.close();
  await store?.close();
  await tf?.stop();
  await devnet?.stop();
});

async function balanceOf(owner: `0x${string}`) {
  return getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
}

async function newAgent(usd: bigint) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  return { account, payer, budget };
}

describe("discovered paid tools", () => {
  it("discovers the specialists' capabilities from the market and pays for a call once", async () => {
    const { account, payer, budget } = await newAgent(1_000_000n);
    await budget.setLimits("agent-a", { total: 500_000n });
    const spend = createSpendCollector();
    const tools = await discoverTools({
      market: market.url,
      agent: "agent-a",
      payer,
      budget,
      onSpend: spend.record,
    });
    expect(tools.map((t) => t.tool.name).sort()).toEqual(["detect-language", "forecast", "summarize"].sort());

    const summarize = tools.find((t) => t.tool.name === "summarize")!.tool;
    const seller = specialists[0]!.payTo;
    const before = await balanceOf(seller);
    const message = await summarize.invoke({
      type: "tool_call",
      id: "call-1",
      name: "summarize",
      args: {
        text: "Tollgate charges per request. Agents buy tools. Budgets keep spending bounded. The end.",
      },
    });
    expect(String(message.content)).toContain("summary");
    expect(message.artifact).toMatchObject({ mode: "one-time", amount: "0.02" });
    expect(await balanceOf(seller)).toBe(before + 20_000n);
    expect(await balanceOf(account.address)).toBe(1_000_000n - 20_000n);
    const report = await budget.report("agent-a");
    expect(report.spent.total).toBe(20_000n);
    expect(spend.report().total).toBe(20_000n);
  });

  it("refuses a call over the budget with BudgetExceeded as text, and nothing is paid", async () => {
    const { account, payer, budget } = await newAgent(1_000_000n);
    await budget.setLimits("agent-b", { total: 10_000n });
    const tools = await discoverTools({ urls: [specialists[0]!.url!], agent: "agent-b", payer, budget });
    const message = await tools[0]!.tool.invoke({
      type: "tool_call",
      id: "call-2",
      name: "summarize",
      args: { text: "One sentence. Another sentence." },
    });
    expect(String(message.content)).toMatch(/^ERROR BudgetExceeded/);
    expect(await balanceOf(account.address)).toBe(1_000_000n);
    expect((await budget.report("agent-b")).spent.total).toBe(0n);
  });

  it("says precisely that a call was paid when the seller fails after the payment, and the ledger holds it", async () => {
    const { account, payer, budget } = await newAgent(1_000_000n);
    await budget.setLimits("agent-d", { total: 1_000_000n });
    const spend = createSpendCollector();
    const tools = await discoverTools({
      urls: [specialists[2]!.url!],
      agent: "agent-d",
      payer,
      budget,
      onSpend: spend.record,
    });
    const message = await tools[0]!.tool.invoke({
      type: "tool_call",
      id: "call-4",
      name: "forecast",
      args: { city: "Lisbon" },
    });
    // The model reads the seller's code and that the money is gone, not a blame on its input.
    expect(String(message.content)).toMatch(
      /^ERROR Internal: forecast answered 500 Internal after being paid 0\.01 USDC \(transaction 0x[0-9a-f]{64}\): the weather feed this seller buys from is down$/,
    );
    expect(message.artifact).toMatchObject({
      mode: "one-time",
      amount: "0.01",
      paid: true,
      error: { code: "Internal" },
    });
    expect(await balanceOf(account.address)).toBe(1_000_000n - 10_000n);
    const report = await budget.report("agent-d");
    expect(report.spent.total).toBe(10_000n);
    expect(report.reserved.total).toBe(0n);
    expect(spend.report().total).toBe(10_000n);
  });

  it("turns a payer without funds into InsufficientFunds text and releases the reservation", async () => {
    const { payer, budget } = await newAgent(0n);
    await budget.setLimits("agent-c", { total: 1_000_000n });
    const tools = await discoverTools({ urls: [specialists[1]!.url!], agent: "agent-c", payer, budget });
    const message = await tools[0]!.tool.invoke({
      type: "tool_call",
      id: "call-3",
      name: "detect-language",
      args: { text: "Das ist ein kurzer deutscher Satz über das Wetter." },
    });
    expect(String(message.content)).toMatch(/^ERROR InsufficientFunds/);
    const report = await budget.report("agent-c");
    expect(report.spent.total).toBe(0n);
    expect(report.reserved.total).toBe(0n);
  });
});
