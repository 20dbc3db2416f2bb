/**
 * A reseller spends inside its buyer's payment, on a real devnet: a buyer pays the reseller's brief,
 * and the reseller buys a summary and a sentiment from two suppliers to serve it. What the suppliers
 * are paid for one brief never exceeds what the buyer paid for it, and a supplier that fails after the
 * buyer paid makes the reseller answer 500 so the buyer's proof comes back; the buyer pays once.
 */
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBriefReseller } from "../agents/createBriefReseller.ts";
import { sentimentScorer } from "../agents/sentimentScorer.ts";
import { summarizer } from "../agents/summarizer.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type CallAllowance, withCallAllowance } from "../src/agent/callAllowance.ts";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import type { SpendEvent } from "../src/agent/spendReport.ts";
import { type Capability, defineCapability } from "../src/agent/tools/capability.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
const specialists: Specialist[] = [];

/** Brief failures the reseller answered (500s); the flaky supplier recovers after the first. */
let resellerFailures = 0;
const SUMMARY = 20_000n;
const SENTIMENT = 10_000n;
const BRIEF = 40_000n;

const summarize = { ...summarizer, pricing: [{ type: "one-time", price: "0.02" }] } as Capability;
const sentimentAt = (amount: string, handler: typeof sentimentScorer.handler) =>
  defineCapability({
    ...sentimentScorer,
    pricing: [{ type: "one-time", price: amount }],
    handler,
  }) as unknown as Capability;
/** Fails (500, after being paid) until the reseller has failed one brief; then answers. */
const flakySentiment = sentimentAt("0.01", async (input, context) => {
  if (resellerFailures === 0) throw new TollgateError("Internal", "the sentiment model is reloading");
  return sentimentScorer.handler(input, context);
});
/** Asks 0.03: with a 0.02 summary that is more than a 0.04 brief earns. */
const dearSentiment = sentimentAt("0.03", (input, context) => sentimentScorer.handler(input, context));

async function start(name: string, accountIndex: number, capabilities: Capability[]) {
  const specialist = createSpecialist({
    name,
    account: devnet.accounts[accountIndex]!.account,
    capabilities,
    facilitator: tf.url,
    network: devnet.network,
    token: devnet.contracts.usd,
  });
  await specialist.start();
  specialists.push(specialist);
  return specialist;
}

/** A reseller of briefs at 0.04 buying from `suppliers`, with its own wallet and budget. */
async function startReseller(name: string, accountIndex: number, supplierUrls: string[]) {
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total: 1_000_000n });
  const spend: SpendEvent[] = [];
  const supplies = await discoverTools({
    urls: supplierUrls,
    agent: name,
    payer: createPayer({
      account: devnet.accounts[accountIndex]!.account,
      network: devnet.network,
      facilitator: tf.url,
    }),
    budget,
    onSpend: (event) => spend.push(event),
  });
  const buy = (tool: string) => (input: Record<string, unknown>, allowance?: CallAllowance) =>
    supplies
      .find((t) => t.capability.name === tool)!
      .tool.invoke(input, allowance === undefined ? undefined : withCallAllowance(allowance));
  const brief = createBriefReseller(
    { summarize: buy("summarize"), sentiment: buy("sentiment") },
    { price: "0.04" },
  );
  const counted: Capability = {
    ...(brief as unknown as Capability),
    handler: async (input, context) => {
      try {
        return await brief.handler(input as never, context);
      } catch (error) {
        resellerFailures++;
        throw error;
      }
    },
  };
  const specialist = await start(name, accountIndex, [counted]);
  return { specialist, budget, spend };
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 8 });
  tf = await startTestFacilitator(devnet);
});

afterAll(async () => {
  for (const s of specialists) await s.stop();
  await tf?.stop();
  await devnet?.stop();
});

const balanceOf = (owner: `0x${string}`) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function newBuyer(name: string, resellerUrl: string) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 1_000_000n });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total: 1_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
  const [brief] = await discoverTools({ urls: [resellerUrl], agent: name, payer, budget });
  const call = async (id: string) => {
    const message = (await brief!.tool.invoke({
      type: "tool_call",
      id,
      name: "brief",
      args: { text: "The trains were late again. Everyone missed the meeting. It was a terrible morning." },
    })) as { content: unknown; artifact: Record<string, unknown> };
    return { text: String(message.content), artifact: message.artifact };
  };
  return { account, budget, call };
}

describe("a reseller spends inside its buyer's payment", () => {
  it("answers 500 when a supplier fails after the buyer paid; the re-sent proof is served and every party is paid once", async () => {
    const summarizerSeller = await start("summarizer", 2, [summarize]);
    const sentimentSeller = await start("flaky-sentiment", 3, [flakySentiment]);
    const reseller = await startReseller("reseller-flaky", 4, [summarizerSeller.url!, sentimentSeller.url!]);
    const buyer = await newBuyer("brief-buyer-1", reseller.specialist.url!);
    const parties = [
      buyer.account.address,
      reseller.specialist.payTo,
      summarizerSeller.payTo,
      sentimentSeller.payTo,
    ];
    const before = await Promise.all(parties.map(balanceOf));

    const { text, artifact } = await buyer.call("b-1");
    expect(resellerFailures).toBe(1); // the first run failed, and its 500 gave the buyer's proof back
    expect(JSON.parse(text)).toMatchObject({ mood: "negative", sources: ["summarize", "sentiment"] });
    expect(artifact).toMatchObject({ mode: "one-time", amount: "0.04" });

    const after = await Promise.all(parties.map(balanceOf));
    const delta = after.map((b, i) => b - before[i]!);
    // The buyer paid once; each supplier was paid once (the reseller redeemed the sentiment proof it
    // had paid for instead of paying again); the reseller kept the difference.
    expect(delta).toEqual([-BRIEF, BRIEF - SUMMARY - SENTIMENT, SUMMARY, SENTIMENT]);
    expect((await buyer.budget.report("brief-buyer-1")).spent.total).toBe(BRIEF);
    const resellerReport = await reseller.budget.report("reseller-flaky");
    expect(resellerReport.spent.total).toBe(SUMMARY + SENTIMENT);
    expect(resellerReport.reserved.total).toBe(0n);
    // The ledger's spend is the chain's: the failed sentiment call holds the payment, the redeemed one none.
    const sentimentEvents = reseller.spend.filter((e) => e.tool === "sentiment");
    expect(sentimentEvents.map((e) => [e.ok, e.amount])).toEqual([
      [false, SENTIMENT],
      [false, 0n],
      [true, 0n],
    ]);
  });

  it("never spends more on suppliers for one brief than the brief earned, even across the buyer's re-sends", async () => {
    const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
    const dear = await start("dear-sentiment", 5, [dearSentiment]);
    const reseller = await startReseller("reseller-dear", 6, [summarizerSeller.url!, dear.url!]);
    const buyer = await newBuyer("brief-buyer-2", reseller.specialist.url!);
    const dearBefore = await balanceOf(dear.payTo);
    const buyerBefore = await balanceOf(buyer.account.address);

    const { text, artifact } = await buyer.call("b-2");
    // The reseller could not serve within what the brief earned: a paid error for the buyer, whose
    // proof stays redeemable (the reseller answered 500 every time), paid once.
    expect(text).toMatch(/^ERROR Internal: brief answered 500 Internal after being paid 0\.04 USDC/);
    expect(text).toContain("the reseller could not buy sentiment: BudgetExceeded");
    expect(artifact).toMatchObject({ paid: true, amount: "0.04" });
    expect(buyerBefore - (await balanceOf(buyer.account.address))).toBe(BRIEF);
    // Supplier spend for the brief: the summary once (reused across the re-sends), never the sentiment.
    const report = await reseller.budget.report("reseller-dear");
    expect(report.spent.total).toBe(SUMMARY);
    expect(report.spent.total).toBeLessThanOrEqual(BRIEF);
    expect(report.reserved.total).toBe(0n);
    expect(await balanceOf(dear.payTo)).toBe(dearBefore);
    const refusals = reseller.spend.filter((e) => e.tool === "sentiment");
    expect(refusals.every((e) => e.error === "BudgetExceeded" && e.amount === 0n)).toBe(true);
    expect(refusals.length).toBeGreaterThan(0);
  });
});
