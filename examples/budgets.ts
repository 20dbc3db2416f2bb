/**
 * Budgets: three agents buy from two specialists (a summarizer at 0.02 USDC a call, a language detector
 * at 0.005) under budgets kept in a persistent ledger. Spends a limit forbids are refused before any
 * money moves, and the paid tool returns the refusal as text with its code, so the model can act on it:
 * - "researcher": total 0.05, per call 0.03, at most 0.04 with the summarizer → the third summary is
 *   refused by the per-provider limit, the third detection by the total;
 * - "intern": per call 0.01 → no summary at all;
 * - "supervised": spends above 0.01 need the owner's approval, which the hook denies.
 *
 *   npx tsx examples/budgets.ts
 */
import { createBudgetLedger, createSpecialist, discoverTools, type Specialist } from "tollgate/agent";
import { getTokenBalance } from "tollgate/chain";
import { createPayer } from "tollgate/client";
import { formatUnitsExact, parseUnitsExact, systemClock } from "tollgate/protocol";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { languageDetector } from "../agents/languageDetector.ts";
import { summarizer } from "../agents/summarizer.ts";
import { type ExampleOptions, printToStdout, runIfMain, startLocalStack } from "./startLocalStack.ts";

/** `outcome` is "paid" or the error code; `limit` names the budget limit that refused the spend. */
export type BudgetCall = { agent: string; tool: string; outcome: string; limit?: string | undefined };
export type BudgetsResult = {
  calls: BudgetCall[];
  /** Per agent: what its ledger says it spent, and what left its wallet on chain. */
  spent: Record<string, { ledger: bigint; onChain: bigint }>;
  /** Spends the approval hook was asked about. */
  approvalRequests: { agent: string; amount: bigint }[];
};

const TEXT = "Tollgate charges per request. Agents buy tools under budgets. Nothing is spent twice.";

export async function main(options: ExampleOptions = {}): Promise<BudgetsResult> {
  const print = options.print ?? printToStdout;
  const stack = await startLocalStack();
  const sellers: Specialist[] = [];
  try {
    const { devnet, facilitatorUrl, store } = stack;
    for (const [name, index, capability] of [
      ["summarizer", 2, summarizer],
      ["linguist", 3, languageDetector],
    ] as const) {
      const specialist = createSpecialist({
        name,
        account: devnet.accounts[index]!.account,
        capabilities: [capability],
        facilitator: facilitatorUrl,
        network: devnet.network,
        token: devnet.contracts.usd,
      });
      await specialist.start();
      sellers.push(specialist);
    }
    const [summarizerSeller] = sellers;

    // The owner's ledger (limits are also set from the shell: `tollgate budget set researcher --total 0.05 …`).
    const budget = createBudgetLedger({ store, clock: systemClock });
    await budget.setLimits("researcher", {
      total: parseUnitsExact("0.05"),
      perCall: parseUnitsExact("0.03"),
      perProvider: { [summarizerSeller!.payTo]: parseUnitsExact("0.04") },
    });
    await budget.setLimits("intern", { perCall: parseUnitsExact("0.01") });
    // A second view of the same ledger, with an approval hook for spends above 0.01 USDC.
    const approvalRequests: { agent: string; amount: bigint }[] = [];
    const supervisedBudget = createBudgetLedger({
      store,
      clock: systemClock,
      approval: {
        threshold: parseUnitsExact("0.01"),
        hook: async (request) => {
          approvalRequests.push({ agent: request.agent, amount: request.amount });
          return false; // the owner says no
        },
      },
    });
    await supervisedBudget.setLimits("supervised", { total: parseUnitsExact("1") });

    const calls: BudgetCall[] = [];
    const spent: BudgetsResult["spent"] = {};
    const runAgent = async (agent: string, ledger: typeof budget, plan: string[]) => {
      const account = privateKeyToAccount(generatePrivateKey());
      await devnet.fund(account.address, { usd: parseUnitsExact("1") });
      const payer = createPayer({ account, network: devnet.network, facilitator: facilitatorUrl });
      const tools = await discoverTools({ urls: sellers.map((s) => s.url!), agent, payer, budget: ledger });
      for (const name of plan) {
        const tool = tools.find((t) => t.tool.name === name)!.tool;
        const content = String(await tool.invoke({ text: TEXT }));
        const outcome = /^ERROR (\w+)/.exec(content)?.[1] ?? "paid";
        calls.push({ agent, tool: name, outcome, limit: /the (\w+) limit/.exec(content)?.[1] });
        print(`${agent.padEnd(10)} ${name.padEnd(16)} → ${outcome === "paid" ? "paid" : content}`);
      }
      const onChain =
        parseUnitsExact("1") -
        (await getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: account.address }));
      spent[agent] = { ledger: (await ledger.report(agent)).spent.total, onChain };
      print(`${agent.padEnd(10)} spent ${formatUnitsExact(onChain)} USDC`);
    };

    await runAgent("researcher", budget, [
      "summarize",
      "summarize",
      "summarize",
      "detect-language",
      "detect-language",
      "detect-language",
    ]);
    await runAgent("intern", budget, ["summarize", "detect-language"]);
    await runAgent("supervised", supervisedBudget, ["summarize", "detect-language"]);
    return { calls, spent, approvalRequests };
  } finally {
    for (const s of sellers.reverse()) await s.stop();
    await stack.stop();
  }
}

await runIfMain(import.meta.url, main);
