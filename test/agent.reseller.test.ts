/**
 * A reseller spends inside its buyer's payment, on a real devnet: a buyer pays the reseller's brief,
 * and the reseller buys a summary and a sentiment from two suppliers to serve it. What the suppliers
 * are paid for one brief never exceeds what the buyer paid for it, and a supplier that fails after the
 * buyer paid makes the reseller answer 500 so the buyer's proof comes back; the buyer pays once.
 */
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBriefReseller } from "../agents/createBriefReseller.ts";
import { sentimentScorer } from "../agents/sentimentScorer.ts";
import { summarizer } from "../agents/summarizer.ts";
import type { BudgetLimitsInput } from "../src/agent/budget/budgetLimits.ts";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type CallAllowance, withCallAllowance } from "../src/agent/callAllowance.ts";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import type { SpendEvent } from "../src/agent/spendReport.ts";
import { type Capability, defineCapability } from "../src/agent/tools/capability.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
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

async function start(
  name: string,
  accountIndex: number,
  capabilities: Capability[],
  plans?: Parameters<typeof createSpecialist>[0]["plans"],
  facilitator = tf.url,
) {
  const specialist = createSpecialist({
    plans,
    name,
    account: devnet.accounts[accountIndex]!.account,
    capabilities,
    facilitator,
    network: devnet.network,
    token: devnet.contracts.usd,
  });
  await specialist.start();
  specialists.push(specialist);
  return specialist;
}

/**
 * A reseller of briefs at 0.04 buying from `suppliers`, with its own wallet and budget (`limits` beside
 * the total; `purchases`: what a sale pays each supplier, reserved under it at admission).
 */
async function startReseller(
  name: string,
  accountIndex: number,
  supplierUrls: string[],
  total = 1_000_000n,
  extra: {
    limits?: BudgetLimitsInput;
    purchases?: { provider: Address; amount: bigint }[];
    /** The facilitator the reseller's own gate uses (its purchases go through the file's). */
    facilitator?: string;
  } = {},
) {
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { ...extra.limits, total });
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
    {
      price: "0.04",
      admission: {
        budget,
        agent: name,
        ...(extra.purchases === undefined ? {} : { purchases: extra.purchases }),
      },
    },
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
  const specialist = await start(name, accountIndex, [counted], undefined, extra.facilitator);
  return { specialist, budget, spend };
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 15 });
  tf = await startTestFacilitator(devnet);
});

afterAll(async () => {
  for (const s of specialists) await s.stop();
  await tf?.stop();
  await devnet?.stop();
});

const balanceOf = (owner: `0x${string}`) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

/** `wait`: how the buyer's payer waits before re-sending a proof (default a timer). */
async function newBuyer(
  name: string,
  resellerUrl: string,
  wait?: (ms: number) => Promise<void>,
  facilitator = tf.url,
) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 1_000_000n });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total: 1_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator });
  const [brief] = await discoverTools({
    urls: [resellerUrl],
    agent: name,
    payer,
    budget,
    ...(wait === undefined ? {} : { wait }),
  });
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

  it("refuses a sale its budget cannot reserve for with SaleNotAdmitted before the buyer pays", async () => {
    const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
    const sentimentSeller = specialists.find((s) => s.name === "flaky-sentiment")!;
    // 0.03 left: less than the 0.04 one brief may cost its suppliers.
    const reseller = await startReseller(
      "reseller-poor",
      7,
      [summarizerSeller.url!, sentimentSeller.url!],
      30_000n,
    );
    const buyer = await newBuyer("brief-buyer-poor", reseller.specialist.url!);
    const before = await balanceOf(buyer.account.address);
    const { text, artifact } = await buyer.call("b-poor");
    expect(text).toMatch(
      /^ERROR SaleNotAdmitted: brief answered 503 SaleNotAdmitted: reseller-poor cannot take/,
    );
    expect(artifact).toMatchObject({ paid: false, amount: "0" });
    expect(await balanceOf(buyer.account.address)).toBe(before);
    expect((await buyer.budget.report("brief-buyer-poor")).spent.total).toBe(0n);
    const report = await reseller.budget.report("reseller-poor");
    expect([report.spent.total, report.reserved.total]).toEqual([0n, 0n]);
  });

  it("serves or refuses unpaid each of eight briefs at once when its budget reserves only two sales", async () => {
    const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
    const sentimentSeller = specialists.find((s) => s.name === "flaky-sentiment")!;
    const reseller = await startReseller(
      "reseller-busy",
      8,
      [summarizerSeller.url!, sentimentSeller.url!],
      90_000n,
    );
    const buyer = await newBuyer("brief-buyer-busy", reseller.specialist.url!);
    const before = await balanceOf(buyer.account.address);
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => buyer.call(`busy-${i}`)));
    const served = results.filter((r) => r.artifact.error === undefined);
    const refused = results.filter((r) => r.artifact.error !== undefined);
    // No brief was paid for and not served: every failure is a refusal before paying.
    for (const r of refused) {
      expect(r.artifact).toMatchObject({ paid: false, amount: "0", error: { code: "SaleNotAdmitted" } });
    }
    expect(served.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    expect(before - (await balanceOf(buyer.account.address))).toBe(BRIEF * BigInt(served.length));
    const report = await reseller.budget.report("reseller-busy");
    expect(report.spent.total).toBe((SUMMARY + SENTIMENT) * BigInt(served.length));
    expect(report.spent.total).toBeLessThanOrEqual(90_000n);
    expect(report.reserved.total).toBe(0n);
  });

  it("serves a sale whose reservation is all its budget holds: its purchases draw from it", async () => {
    const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
    const sentimentSeller = specialists.find((s) => s.name === "flaky-sentiment")!;
    // Exactly one brief: once admitted, nothing is left outside its sale reservation. The policy must
    // weigh each purchase against the sale it is paid from, not against the budget's rest (empty).
    const reseller = await startReseller(
      "reseller-exact",
      11,
      [summarizerSeller.url!, sentimentSeller.url!],
      BRIEF,
    );
    const buyer = await newBuyer("brief-buyer-exact", reseller.specialist.url!);
    const before = await balanceOf(buyer.account.address);
    const { text, artifact } = await buyer.call("exact-1");
    expect(artifact.error).toBeUndefined();
    expect(JSON.parse(text)).toMatchObject({ sources: ["summarize", "sentiment"] });
    expect(before - (await balanceOf(buyer.account.address))).toBe(BRIEF);
    expect(reseller.spend.map((e) => [e.tool, e.ok, e.amount])).toEqual([
      ["summarize", true, SUMMARY],
      ["sentiment", true, SENTIMENT],
    ]);
    const report = await reseller.budget.report("reseller-exact");
    expect([report.spent.total, report.reserved.total]).toEqual([SUMMARY + SENTIMENT, 0n]);
  });

  it("keeps a paid sale admitted for its re-sent proof while other buyers would take the budget", async () => {
    const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
    let sentimentDown = true;
    const toggled = await start("toggled-sentiment", 12, [
      sentimentAt("0.01", async (input, context) => {
        if (sentimentDown) throw new TollgateError("Internal", "the sentiment model is reloading");
        return sentimentScorer.handler(input, context);
      }),
    ]);
    // Room for one sale and a failed one's spend: 0.03 spent on the failed try leaves 0.04 — a second
    // sale's worth, unless the failed sale is still held for its buyer's re-send.
    const reseller = await startReseller(
      "reseller-resend",
      13,
      [summarizerSeller.url!, toggled.url!],
      70_000n,
    );
    // The buyer waits before re-sending its proof: meanwhile another buyer asks for a brief (unpaid),
    // and then the supplier recovers. Deterministic: no timing decides who gets the budget.
    let other: { status: number; body: string } | undefined;
    const wait = async () => {
      if (other !== undefined) return;
      const answer = await fetch(`${reseller.specialist.url}/brief`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ text: "Another text to brief. It is short." }),
      });
      other = { status: answer.status, body: await answer.text() };
      sentimentDown = false;
    };
    const buyer = await newBuyer("brief-buyer-resend", reseller.specialist.url!, wait);
    const before = await balanceOf(buyer.account.address);
    const toggledBefore = await balanceOf(toggled.payTo);

    const { text, artifact } = await buyer.call("resend-1");
    // The other buyer was refused before paying: the failed sale kept its reservation.
    expect(other?.status).toBe(503);
    expect(JSON.parse(other!.body)).toMatchObject({ error: { code: "SaleNotAdmitted" } });
    // The re-sent proof found its sale: served, paid once; the supplier's proof was redeemed.
    expect(artifact.error).toBeUndefined();
    expect(JSON.parse(text)).toMatchObject({ sources: ["summarize", "sentiment"] });
    expect(before - (await balanceOf(buyer.account.address))).toBe(BRIEF);
    expect((await balanceOf(toggled.payTo)) - toggledBefore).toBe(SENTIMENT);
    const report = await reseller.budget.report("reseller-resend");
    expect([report.spent.total, report.reserved.total]).toEqual([SUMMARY + SENTIMENT, 0n]);
  });

  it("reserves each supplier's part at admission: a per-provider limit refuses sales unpaid, never a paid purchase", async () => {
    const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
    const sentimentSeller = specialists.find((s) => s.name === "flaky-sentiment")!;
    // The total has room for every brief; the summarizer's per-provider limit only for two summaries.
    const reseller = await startReseller(
      "reseller-capped",
      14,
      [summarizerSeller.url!, sentimentSeller.url!],
      1_000_000n,
      {
        limits: { perProvider: { [summarizerSeller.payTo]: 2n * SUMMARY } },
        purchases: [
          { provider: summarizerSeller.payTo, amount: SUMMARY },
          { provider: sentimentSeller.payTo, amount: SENTIMENT },
        ],
      },
    );
    const buyer = await newBuyer("brief-buyer-capped", reseller.specialist.url!);
    const before = await balanceOf(buyer.account.address);
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => buyer.call(`capped-${i}`)));
    const served = results.filter((r) => r.artifact.error === undefined);
    const refused = results.filter((r) => r.artifact.error !== undefined);
    for (const r of refused) {
      expect(r.artifact).toMatchObject({ paid: false, amount: "0", error: { code: "SaleNotAdmitted" } });
    }
    expect(served.length).toBe(2);
    expect(before - (await balanceOf(buyer.account.address))).toBe(2n * BRIEF);
    const report = await reseller.budget.report("reseller-capped");
    expect([report.spent.total, report.reserved.total]).toEqual([2n * (SUMMARY + SENTIMENT), 0n]);
    expect(reseller.spend.every((e) => e.ok)).toBe(true);
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
    // The failed sale stays admitted for the buyer's proof, which it may send again until the offer
    // lapses: what the sale still holds is reserved, nothing beyond it.
    expect(report.reserved.total).toBe(BRIEF - SUMMARY);
    expect(await balanceOf(dear.payTo)).toBe(dearBefore);
    const refusals = reseller.spend.filter((e) => e.tool === "sentiment");
    expect(refusals.every((e) => e.error === "BudgetExceeded" && e.amount === 0n)).toBe(true);
    expect(refusals.length).toBeGreaterThan(0);
  });

  it("subscribes across its sales to a supplier plan dearer than one sale earns, once, and serves every sale", async () => {
    const PLAN = 50_000n;
    const account = devnet.accounts[9]!;
    const hash = await createPlan(devnet.walletClient(account), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: PLAN,
      interval: BigInt(30 * 86_400),
      includedUnits: 0n,
      overageUnitPrice: 0n,
    });
    const planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
    // Sentiment by subscription only, 0.05 a month: more than a 0.04 brief earns.
    const monthly = defineCapability({
      ...sentimentScorer,
      pricing: [
        {
          type: "subscription",
          plan: { price: "0.05", interval: 30 * 86_400, includedUnits: 0, overageUnitPrice: "0" },
        },
      ],
    }) as unknown as Capability;
    const supplier = await start("monthly-sentiment", 9, [monthly], {
      sentiment: {
        planId: planId.toString(),
        amount: PLAN,
        interval: 30 * 86_400,
        includedUnits: 0,
        overageUnitPrice: 0n,
        manager: devnet.contracts.subscriptionManager,
      },
    });
    const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
    const reseller = await startReseller("reseller-monthly", 10, [summarizerSeller.url!, supplier.url!]);
    const buyer = await newBuyer("brief-buyer-monthly", reseller.specialist.url!);
    const supplierBefore = await balanceOf(supplier.payTo);

    const first = await buyer.call("m-1");
    const second = await buyer.call("m-2");
    expect([first.artifact.error, second.artifact.error]).toEqual([undefined, undefined]);
    expect(JSON.parse(second.text)).toMatchObject({ sources: ["summarize", "sentiment"] });
    // One period paid once, from the reseller's own budget; each sale paid its summary within what it earned.
    expect((await balanceOf(supplier.payTo)) - supplierBefore).toBe(PLAN);
    const report = await reseller.budget.report("reseller-monthly");
    expect(report.perKind.subscription.spent).toBe(PLAN);
    expect(report.perKind["one-time"].spent).toBe(2n * SUMMARY);
    const sentiment = reseller.spend.filter((e) => e.tool === "sentiment");
    expect(sentiment.map((e) => [e.ok, e.mode, e.amount])).toEqual([
      [true, "subscription", PLAN],
      [true, "subscription", 0n],
    ]);
  });

  it("gives each payment its own sale when the facilitator settles several in one transaction", async () => {
    // A facilitator that settles one batch at a time: payments that arrive while a batch is on its
    // way share the next batch's transaction, as they do under load.
    const batching = await startTestFacilitator(devnet, {
      gasAccount: devnet.accounts[13]!,
      settlement: { maxInFlight: 1 },
    });
    try {
      const summarizerSeller = specialists.find((s) => s.name === "summarizer")!;
      const sentimentSeller = specialists.find((s) => s.name === "flaky-sentiment")!;
      const reseller = await startReseller(
        "reseller-batched",
        11,
        [summarizerSeller.url!, sentimentSeller.url!],
        1_000_000n,
        { facilitator: batching.url },
      );
      const buyers: Awaited<ReturnType<typeof newBuyer>>[] = [];
      for (const n of ["first", "second", "third"]) {
        buyers.push(
          await newBuyer(`brief-buyer-batched-${n}`, reseller.specialist.url!, undefined, batching.url),
        );
      }
      const before = await Promise.all(buyers.map((b) => balanceOf(b.account.address)));
      const rows = async (status: string) =>
        Number(
          (
            await batching.store.query<{ n: string }>(
              "SELECT count(*) AS n FROM payments WHERE status = $1 AND payer = ANY($2::text[])",
              [status, buyers.map((b) => b.account.address.toLowerCase())],
            )
          )[0]!.n,
        );
      const until = async (check: () => Promise<boolean>) => {
        for (let i = 0; i < 600 && !(await check()); i++) await new Promise((r) => setTimeout(r, 50));
        expect(await check()).toBe(true);
      };
      await devnet.testClient.setAutomine(false);
      let results: Awaited<ReturnType<(typeof buyers)[number]["call"]>>[];
      try {
        // The first payment's batch goes out and waits unmined; the next two queue behind it.
        const first = buyers[0]!.call("batched-0");
        await until(async () => (await rows("submitted")) === 1);
        const rest = buyers.slice(1).map((b, i) => b.call(`batched-${i + 1}`));
        await until(async () => (await rows("pending")) === 2);
        await devnet.testClient.setAutomine(true);
        await devnet.mine();
        results = await Promise.all([first, ...rest]);
      } finally {
        await devnet.testClient.setAutomine(true);
      }
      // The two queued payments were settled by one transaction (the case this test is about)…
      const transactions = results.map((r) => r.artifact.transaction);
      expect(transactions[1]).toBeDefined();
      expect(transactions[1]).toBe(transactions[2]);
      // …and each was its own sale: every brief served, within what it earned.
      for (const r of results) {
        expect(r.artifact.error).toBeUndefined();
        expect(JSON.parse(r.text)).toMatchObject({ sources: ["summarize", "sentiment"] });
      }
      const after = await Promise.all(buyers.map((b) => balanceOf(b.account.address)));
      expect(after.map((a, i) => before[i]! - a)).toEqual([BRIEF, BRIEF, BRIEF]);
      const report = await reseller.budget.report("reseller-batched");
      expect([report.spent.total, report.reserved.total]).toEqual([3n * (SUMMARY + SENTIMENT), 0n]);
    } finally {
      await batching.stop();
    }
  });
});
