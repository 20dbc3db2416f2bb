/**
 * Agent-to-agent resale: the demo marketplace (agents/marketplace.ts) on a devnet — a summarizer, a
 * metered sentiment scorer and a reseller whose "brief" (0.08 USDC) buys a summary and a mood from
 * those two under its own budget, among other sellers. An agent finds the brief in the market and buys
 * two; the reseller buys from its suppliers while serving it. Every USDC is accounted for: what the
 * agent paid the reseller kept or passed on to its suppliers.
 *
 *   npx tsx examples/agentResale.ts
 */
import pino from "pino";
import { createBudgetLedger, discoverTools } from "tollgate/agent";
import { getTokenBalance } from "tollgate/chain";
import { createPayer } from "tollgate/client";
import { serveMarket } from "tollgate/market";
import { formatUnitsExact, parseUnitsExact, systemClock } from "tollgate/protocol";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { startMarketplace } from "../agents/marketplace.ts";
import { type ExampleOptions, printToStdout, runIfMain, startLocalStack } from "./startLocalStack.ts";

export type AgentResaleResult = {
  briefs: string[];
  /** Balance changes on chain, smallest units (negative = paid out). */
  deltas: { agent: bigint; reseller: bigint; summarizer: bigint; sentiment: bigint };
  /** What the reseller's own ledger says it spent on its suppliers. */
  resellerSpent: bigint;
  /** The reseller's purchases, one per supplier call. */
  resellerPurchases: { tool: string; mode: string; amount: bigint }[];
};

export async function main(options: ExampleOptions = {}): Promise<AgentResaleResult> {
  const print = options.print ?? printToStdout;
  const stack = await startLocalStack();
  const stops: (() => Promise<void>)[] = [];
  try {
    const { devnet, facilitatorUrl, store } = stack;
    const market = await serveMarket({ store, clock: systemClock, logger: pino({ level: "silent" }) });
    stops.push(() => market.close());
    const marketplace = await startMarketplace({
      devnet,
      facilitatorUrl,
      facilitatorSigner: stack.facilitatorSigner.address,
      marketUrl: market.url,
      store,
      onSeller: (seller) => print(`seller ${seller.name.padEnd(10)} ${seller.specialist.url}`),
    });
    stops.push(() => marketplace.stop());
    const seller = (name: string) => marketplace.sellers.find((s) => s.name === name)!.account.address;
    const parties = {
      reseller: seller("reseller"),
      summarizer: seller("summarizer"),
      sentiment: seller("sentiment"),
    };

    // The buying agent: its own wallet and budget; it finds the brief in the market.
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: parseUnitsExact("1") });
    const budget = createBudgetLedger({ store, clock: systemClock });
    await budget.setLimits("buyer", { total: parseUnitsExact("0.5"), perCall: parseUnitsExact("0.1") });
    const tools = await discoverTools({
      market: market.url,
      search: { q: "brief" },
      agent: "buyer",
      payer: createPayer({ account, network: devnet.network, facilitator: facilitatorUrl }),
      budget,
    });
    const brief = tools.find((t) => t.tool.name === "brief")!.tool;

    const balanceOf = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    const snapshot = async () => ({
      agent: await balanceOf(account.address),
      reseller: await balanceOf(parties.reseller),
      summarizer: await balanceOf(parties.summarizer),
      sentiment: await balanceOf(parties.sentiment),
    });
    const before = await snapshot();
    const briefs: string[] = [];
    for (const text of [
      "The bakery opened early. Customers loved the fresh bread. Everyone left happy.",
      "The train was late again. The station was cold and crowded. Nobody was pleased.",
    ]) {
      briefs.push(String(await brief.invoke({ text })));
      print(`agent bought a brief: ${briefs.at(-1)!.slice(0, 100)}`);
    }
    const after = await snapshot();
    const deltas = {
      agent: after.agent - before.agent,
      reseller: after.reseller - before.reseller,
      summarizer: after.summarizer - before.summarizer,
      sentiment: after.sentiment - before.sentiment,
    };
    const resellerPurchases = marketplace.resellerSpend
      .filter((e) => e.ok)
      .map((e) => ({ tool: e.tool, mode: e.mode, amount: e.amount }));
    for (const p of resellerPurchases) {
      print(`  the reseller bought ${p.tool}: ${p.mode} ${formatUnitsExact(p.amount)} USDC`);
    }
    // The reseller keeps its ledger in the same store, so the same ledger reads it.
    const resellerSpent = (await budget.report("reseller")).spent.total;
    print(
      `agent ${formatUnitsExact(deltas.agent)}, reseller ${formatUnitsExact(deltas.reseller)}, summarizer +${formatUnitsExact(deltas.summarizer)}, sentiment +${formatUnitsExact(deltas.sentiment)} USDC`,
    );
    return { briefs, deltas, resellerSpent, resellerPurchases };
  } finally {
    for (const stop of stops.reverse()) await stop();
    await stack.stop();
  }
}

await runIfMain(import.meta.url, main);
