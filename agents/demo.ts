/**
 * The main job (`npm run demo`): everything on embedded defaults — an anvil devnet, PGlite, the
 * facilitator, the market, five specialist sellers — and a research agent that discovers their paid
 * endpoints, buys them under a budget (subscribing or paying once as its policy decides) and reports
 * what it spent; then a month passes on chain, the keeper renews the subscriptions, and the providers'
 * webhook receiver shows the events it got.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import pino from "pino";
import type { Address } from "viem";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createOrchestrator, type OrchestratorEvent } from "../src/agent/orchestrator/createOrchestrator.ts";
import { modelFromEnv } from "../src/agent/orchestrator/modelFromEnv.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import {
  createSpendCollector,
  formatSpendReport,
  type SpendEvent,
  type SpendReport,
} from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { tollgateUsdDomain } from "../src/chain/networks.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { createFacilitator, type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { verifyWebhook } from "../src/gate/verifyWebhook.ts";
import { serveMarket } from "../src/market/createMarket.ts";
import { formatUnitsExact, parseUnitsExact } from "../src/protocol/amount.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createStore } from "../src/store/createStore.ts";
import type { Store } from "../src/store/store.ts";
import { loadDocuments } from "./loadDocuments.ts";
import { demoAccounts, type Marketplace, startMarketplace } from "./marketplace.ts";

export const DEMO_TASK =
  "Summarize each document in 2 sentences, detect its language, score its mood and write a brief of it.";

export type DemoOptions = {
  /** Where progress lines go (default: stdout). */
  print?: ((line: string) => void) | undefined;
  env?: Record<string, string | undefined> | undefined;
  signal?: AbortSignal | undefined;
  /** Limit the documents (for quick runs). */
  maxDocuments?: number | undefined;
};

export type DemoResult = {
  report: SpendReport;
  resellerSpend: SpendEvent[];
  /** On-chain USDC the research agent paid, measured from its balance. */
  agentPaidOnChain: bigint;
  /** What the agent's ledger says it spent, including metered overage. */
  ledgerSpent: bigint;
  renewals: number;
  /** What the researcher's renewals cost by the webhook events, and by its on-chain balance. */
  researcherRenewals: bigint;
  researcherRenewedOnChain: bigint;
  webhookEvents: { type: string; provider?: string | undefined }[];
  planner: string;
  answer: string;
};

type ReceivedEvent = { id: string; type: string; data: Record<string, unknown> };

/** A provider's webhook receiver: verifies each delivery's signature before accepting it. */
async function startWebhookReceiver(
  secrets: () => string[],
): Promise<{ url: string; events: ReceivedEvent[]; close(): Promise<void> }> {
  const events: ReceivedEvent[] = [];
  const seen = new Set<string>();
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (c: Buffer) => chunks.push(c));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const headers = new Headers();
      for (const [k, v] of Object.entries(request.headers)) if (typeof v === "string") headers.set(k, v);
      const verified = secrets().some((secret) => {
        try {
          verifyWebhook(secret, headers, body, { clock: systemClock });
          return true;
        } catch {
          return false;
        }
      });
      if (!verified) {
        response.writeHead(400).end();
        return;
      }
      const event = JSON.parse(body) as ReceivedEvent;
      if (!seen.has(event.id)) {
        seen.add(event.id);
        events.push(event);
      }
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    events,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function waitFor<T>(
  signal: AbortSignal | undefined,
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    signal?.throwIfAborted();
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const print = options.print ?? ((line: string) => process.stdout.write(`${line}\n`));
  const env = options.env ?? {};
  const cleanups: (() => Promise<void>)[] = [];
  const usdc = (v: bigint) => `${formatUnitsExact(v)} USDC`;
  const signal = options.signal;
  // Each step first checks for an interrupt, so Ctrl-C between steps stops at once.
  const step = (text: string) => {
    signal?.throwIfAborted();
    print(`\n▶ ${text}`);
  };
  /** Progress lines stop once interrupted: calls cut short by the stop are not purchases to report. */
  const progress = (line: string) => {
    if (signal?.aborted !== true) print(line);
  };
  /** How one call was paid: the mode and what it cost, or that a subscription already paid covered it. */
  const how = (event: SpendEvent) => {
    if (!event.ok) return `failed: ${event.error}`;
    if (event.amount > 0n) return `${event.mode} ${usdc(event.amount)}`;
    return event.mode === "subscription" ? "subscription (covered, nothing to pay)" : event.mode;
  };
  const names = new Map<string, string>();
  const nameOf = (address: string) => names.get(address.toLowerCase()) ?? address;

  try {
    step("Starting the devnet (anvil), embedded PGlite, the facilitator and the market");
    const devnet: Devnet = await startDevnet({ accounts: 10 });
    cleanups.push(() => devnet.stop());
    const store: Store = await createStore({ dataDir: "memory://" });
    cleanups.push(() => store.close());
    const logger = pino({ level: env.LOG_LEVEL ?? "silent" });
    const gasAccount = devnet.accounts[devnet.accounts.length - 1]!;
    const { createSubscriptionsModule } = await import(
      "../src/facilitator/subscriptions/subscriptionsModule.ts"
    );
    const { builtinModules } = await import("../src/facilitator/modules.ts");
    const { subscriptionsModule } = await import("../src/facilitator/subscriptions/subscriptionsModule.ts");
    const { createWebhooksModule, webhooksModule } = await import(
      "../src/facilitator/webhooks/createWebhooksModule.ts"
    );
    const facilitator = createFacilitator({
      store,
      publicClient: devnet.publicClient,
      network: devnet.network,
      gasAccount: gasAccount.account,
      proofKeys: [generateProofKey().key],
      batchSettler: devnet.contracts.batchSettler,
      subscriptionManager: devnet.contracts.subscriptionManager,
      tokens: [{ address: devnet.contracts.usd, ...tollgateUsdDomain, symbol: "USDC", decimals: 6 }],
      logger,
      // The keeper looks for due renewals every half second, so the month that passes shows at once.
      builtinModules: false,
      // The demo's webhook receiver is on this machine: loopback targets are allowed here, explicitly
      // (a facilitator refuses them by default).
      modules: builtinModules.map((m) =>
        m === subscriptionsModule
          ? createSubscriptionsModule({ keeper: { intervalMs: 500 } })
          : m === webhooksModule
            ? createWebhooksModule({ allowTargets: ["127.0.0.0/8", "::1"] })
            : m,
      ),
    });
    await facilitator.start();
    cleanups.push(() => facilitator.stop());
    const facilitatorServer: RunningServer = await serveApp(facilitator.app);
    cleanups.push(() => facilitatorServer.close());
    const market = await serveMarket({ store, clock: systemClock, logger });
    cleanups.push(() => market.close());
    print(`  devnet      ${devnet.rpcUrl} (chain ${devnet.chain.id})`);
    print(`  facilitator ${facilitatorServer.url}`);
    print(`  market      ${market.url}`);

    const webhookSecrets: string[] = [];
    const receiver = await startWebhookReceiver(() => webhookSecrets);
    cleanups.push(() => receiver.close());

    step("Starting the specialist sellers and registering them with the facilitator and the market");
    const marketplace: Marketplace = await startMarketplace({
      devnet,
      facilitatorUrl: facilitatorServer.url,
      facilitatorSigner: gasAccount.address,
      marketUrl: market.url,
      store,
      webhookUrl: receiver.url,
      onWebhookSecret: (secret) => webhookSecrets.push(secret),
      onSeller: (seller) => {
        names.set(seller.account.address.toLowerCase(), seller.name);
        const prices = Object.entries(seller.plans)
          .map(
            ([cap, plan]) =>
              `${cap}: plan #${plan.planId} ${usdc(plan.amount)}/30d` +
              (plan.overageUnitPrice > 0n
                ? `, ${plan.includedUnits} included then ${usdc(plan.overageUnitPrice)}/unit`
                : ""),
          )
          .join("; ");
        print(
          `  ${seller.name.padEnd(10)} ${seller.specialist.url}  payTo ${seller.account.address}${prices ? `  (${prices})` : ""}`,
        );
      },
    });
    cleanups.push(() => marketplace.stop());

    step("The research agent discovers paid tools in the market");
    const researcher = devnet.accounts[demoAccounts.researcher]!;
    names.set(researcher.address.toLowerCase(), "researcher");
    const budget = createBudgetLedger({ store, clock: systemClock });
    const limits = {
      total: parseUnitsExact("5"),
      daily: parseUnitsExact("5"),
      perCall: parseUnitsExact("0.5"),
      maxSubscriptionCommitment: parseUnitsExact("1"),
    };
    await budget.setLimits("researcher", limits);
    print(
      `  budget for "researcher": total ${usdc(limits.total)}, per call ${usdc(limits.perCall)}, subscriptions ≤ ${usdc(limits.maxSubscriptionCommitment)}`,
    );
    const payer = createPayer({
      account: researcher.account,
      network: devnet.network,
      facilitator: facilitatorServer.url,
    });
    const spend = createSpendCollector();
    const documents = (await loadDocuments()).slice(0, options.maxDocuments ?? Number.POSITIVE_INFINITY);
    let forecast: Record<string, number> = {};
    // The reseller buys from its suppliers while it serves a brief: show those purchases under it.
    let resellerShown = 0;
    const showResellerPurchases = () => {
      for (const event of marketplace.resellerSpend.slice(resellerShown)) {
        progress(`      ↳ reseller bought ${event.tool} from ${nameOf(event.provider)} → ${how(event)}`);
      }
      resellerShown = marketplace.resellerSpend.length;
    };
    const discovered = await discoverTools({
      market: market.url,
      agent: "researcher",
      payer,
      budget,
      calls: createCallCounter({ clock: systemClock }),
      forecast: (tool) =>
        forecast[tool] === undefined ? undefined : { calls: forecast[tool]!, horizonSeconds: 30 * 86_400 },
      onSpend: (event) => {
        spend.record(event);
        showResellerPurchases();
        progress(`    bought ${event.tool} from ${nameOf(event.provider)} → ${how(event)}`);
      },
    });
    for (const d of discovered) print(`  ${d.tool.name.padEnd(16)} from ${d.seller}  ${d.capability.url}`);
    const tools = discovered.filter((d) => d.tool.name !== "notarize").map((d) => d.tool);

    const model = modelFromEnv(env);
    const orchestrator = createOrchestrator({
      tools,
      model: model ?? "rules",
      onEvent: (event: OrchestratorEvent) => {
        if (event.type === "tool:start")
          progress(`  → ${event.tool}${event.document ? ` (${event.document})` : ""}`);
      },
    });
    forecast = orchestrator.forecast(DEMO_TASK, { documents });
    step(
      `Running the task with the ${orchestrator.planner === "rules" ? "rule planner (offline)" : `model ${orchestrator.planner}`}: "${DEMO_TASK}"`,
    );
    print(
      `  forecast of calls per tool: ${Object.entries(forecast)
        .map(([t, n]) => `${t}×${n}`)
        .join(", ")}`,
    );
    const before = await getTokenBalance(devnet.publicClient, {
      token: devnet.contracts.usd,
      owner: researcher.address,
    });
    const run = await orchestrator.run(DEMO_TASK, { documents }, { signal: options.signal });

    const notarize = discovered.find((d) => d.tool.name === "notarize");
    if (notarize !== undefined) {
      step("Notarizing the report on chain");
      const content = await notarize.tool.invoke({ text: run.answer });
      print(`  ${String(content).slice(0, 160)}`);
    }

    // Metered usage is recorded by the gate and deducted on chain in batches: wait until it has landed.
    step("Waiting for metered usage to settle on chain");
    for (const seller of marketplace.sellers) await seller.specialist.flushUsage();
    const ledgerSpent = (await budget.report("researcher")).spent.total;
    const agentPaidOnChain = await waitFor(signal, "metered usage to settle", async () => {
      const now = await getTokenBalance(devnet.publicClient, {
        token: devnet.contracts.usd,
        owner: researcher.address,
      });
      return before - now >= ledgerSpent ? before - now : undefined;
    }).catch(
      async () =>
        before -
        (await getTokenBalance(devnet.publicClient, {
          token: devnet.contracts.usd,
          owner: researcher.address,
        })),
    );

    step("Spend report");
    const report = spend.report();
    print(
      formatSpendReport(report)
        .split("\n")
        .map((l) => `  ${l}`)
        .join("\n"),
    );
    const after = await budget.report("researcher");
    print(`  budget left: ${usdc(after.remaining.total ?? 0n)} of ${usdc(limits.total)}`);
    print(`  on chain the agent paid ${usdc(agentPaidOnChain)}; its ledger records ${usdc(ledgerSpent)}`);
    const resold = marketplace.resellerSpend.filter((e) => e.ok);
    print(
      `  agent-to-agent: the reseller bought ${resold.length} results from its suppliers for ${usdc(resold.reduce((s, e) => s + e.amount, 0n))}`,
    );

    step("A month passes on chain; the facilitator's keeper collects the renewals");
    const created = receiver.events.filter((e) => e.type === "subscription.created");
    const balanceOf = (owner: Address) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    const beforeRenewal = await balanceOf(researcher.address);
    const chainTime = await devnet.advanceTime(30 * 86_400 + 60);
    print(`  chain time is now ${new Date(Number(chainTime) * 1000).toISOString().slice(0, 10)}`);
    // Every subscription created above comes due; wait until the keeper has collected each of them.
    const renewed = await waitFor(signal, "the keeper's renewals", async () => {
      const events = receiver.events.filter((e) => e.type === "subscription.renewed");
      return events.length >= created.length ? events : undefined;
    });
    const renewals = renewed.length;
    let researcherRenewals = 0n;
    for (const e of renewed) {
      const amount = BigInt(String(e.data.amount));
      const subscriber = String(e.data.subscriber);
      if (subscriber.toLowerCase() === researcher.address.toLowerCase()) researcherRenewals += amount;
      print(
        `  subscription #${e.data.subscriptionId} (plan #${e.data.planId}): ${nameOf(subscriber)} paid ${nameOf(String(e.data.provider))} ${usdc(amount)} for the next 30 days`,
      );
    }
    const researcherRenewedOnChain = beforeRenewal - (await balanceOf(researcher.address));
    print(
      `  on chain the researcher's balance fell by ${usdc(researcherRenewedOnChain)}; its renewals add up to ${usdc(researcherRenewals)}`,
    );

    step("Webhook events the providers received (signatures verified, duplicates dropped)");
    const counts = new Map<string, Map<string, number>>();
    for (const e of receiver.events) {
      const provider = nameOf(String(e.data.provider ?? e.data.payTo ?? "unknown"));
      const byType = counts.get(provider) ?? new Map<string, number>();
      byType.set(e.type, (byType.get(e.type) ?? 0) + 1);
      counts.set(provider, byType);
    }
    for (const [provider, byType] of [...counts].sort(([a], [b]) => a.localeCompare(b))) {
      const listed = [...byType]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([type, n]) => `${type} ×${n}`)
        .join(", ");
      print(`  ${provider.padEnd(10)} ${listed}`);
    }

    const lines = run.answer.split("\n");
    const shown = 12;
    print(`\nAnswer (${run.planner}), first ${Math.min(shown, lines.length)} of ${lines.length} lines:`);
    print(lines.slice(0, shown).join("\n"));
    return {
      report,
      resellerSpend: marketplace.resellerSpend,
      agentPaidOnChain,
      ledgerSpent,
      renewals,
      researcherRenewals,
      researcherRenewedOnChain,
      webhookEvents: receiver.events.map((e) => ({
        type: e.type,
        provider: e.data.provider as Address | undefined,
      })),
      planner: run.planner,
      answer: run.answer,
    };
  } finally {
    // After an interrupt the chain may already be gone (a terminal's Ctrl-C reaches anvil too), so a
    // service waiting on it is given a few seconds, not its full timeouts: the devnet, stopped last,
    // must be reached.
    const patience = signal?.aborted === true ? 3_000 : undefined;
    for (const cleanup of cleanups.reverse()) await withPatience(cleanup(), patience).catch(() => undefined);
  }
}

/** Resolves when `work` settles or `ms` have passed, whichever comes first (no limit when undefined). */
function withPatience(work: Promise<void>, ms: number | undefined): Promise<void> {
  if (ms === undefined) return work;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
