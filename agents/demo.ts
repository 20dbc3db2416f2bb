/**
 * The main job (`npm run demo`): everything on embedded defaults — an anvil devnet, PGlite, the
 * facilitator, the market, five specialist sellers — and a research agent that discovers their paid
 * endpoints, buys them under a budget (subscribing or paying once as its policy decides) and reports
 * what it spent; then a month passes on chain, the keeper renews the subscriptions, and the providers'
 * webhook receiver shows the events it got.
 */
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import pino from "pino";
import type { Address } from "viem";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { agentDashboard } from "../src/agent/dashboard/agentSection.ts";
import { startRunRecording } from "../src/agent/dashboard/runSpendRecords.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createMcpConnections } from "../src/agent/mcp/mcpConnections.ts";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import { modelFromEnv } from "../src/agent/orchestrator/modelFromEnv.ts";
import type { OrchestratorEvent } from "../src/agent/orchestrator/orchestratorEvent.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import {
  createSpendCollector,
  formatSpendReport,
  type SpendEvent,
  type SpendReport,
} from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { createFacilitator, type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { verifyWebhook } from "../src/gate/verifyWebhook.ts";
import { serveMarket } from "../src/market/createMarket.ts";
import { formatUnitsExact, parseUnitsExact } from "../src/protocol/amount.ts";
import { base64UrlEncode } from "../src/protocol/base64.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createStore } from "../src/store/createStore.ts";
import type { Store } from "../src/store/store.ts";
import { type ChannelBurstResult, runChannelBurst } from "./channelBurst.ts";
import { createCallBlocks } from "./demoCallBlocks.ts";
import { budgetLines, notarizedLine, withForecastNotes } from "./demoReportLines.ts";
import { loadDocuments } from "./loadDocuments.ts";
import { demoAccounts, type Marketplace, startMarketplace } from "./marketplace.ts";
import { splitSentences } from "./splitSentences.ts";

export const DEMO_TASK =
  "Summarize each document in 2 sentences, detect its language, score its mood and write a brief of it.";

export type DemoOptions = {
  /** Where progress lines go (default: stdout). */
  print?: ((line: string) => void) | undefined;
  env?: Record<string, string | undefined> | undefined;
  signal?: AbortSignal | undefined;
  /** Limit the documents (for quick runs). */
  maxDocuments?: number | undefined;
  /** Keep everything running (and the dashboard open) after the demo, until `signal` aborts. */
  keep?: boolean | undefined;
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
  /** Tools bought over MCP (docs/mcp.md): the endpoint each was called at, and what it bought. */
  overMcp: { tool: string; url: string; calls: number; amount: bigint }[];
  /** The burst bought through a prepaid channel (docs/channels.md): opened, calls, claimed, returned. */
  channel: ChannelBurstResult;
};

/** Sentences whose language the agent checks in one burst, over a prepaid channel. */
const BURST_CALLS = 24;

/** The seller's tool the research agent buys over MCP rather than HTTP (same listing, prices, budget). */
const MCP_TOOL = "detect-language";

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
  // Calls of the task run at once; each one's lines are printed together when it ends.
  const calls = createCallBlocks(progress);
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
    const { createSubscriptionsModule } = await import("../src/facilitator/subscriptionsModule.ts");
    const { builtinModules } = await import("../src/facilitator/modules.ts");
    const { channelsModule } = await import("../src/schemes/channel/facilitator/channelsModule.ts");
    const { createWebhooksModule, webhooksModule } = await import(
      "../src/facilitator/webhooks/createWebhooksModule.ts"
    );
    const dashboardToken = base64UrlEncode(randomBytes(24));
    // One sealing key for the webhooks module and the dashboard (which rotates secrets).
    const webhookKey = new Uint8Array(randomBytes(32));
    const facilitator = createFacilitator({
      store,
      publicClient: devnet.publicClient,
      network: devnet.network,
      gasAccount: gasAccount.account,
      proofKeys: [generateProofKey().key],
      batchSettler: devnet.contracts.batchSettler,
      subscriptionManager: devnet.contracts.subscriptionManager,
      // Prepaid channels: opened gaslessly here, their vouchers claimed in batches (docs/channels.md).
      channels: devnet.contracts.channels,
      tokens: [
        {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
          symbol: "USDC",
          decimals: 6,
        },
      ],
      logger,
      // The keeper looks for due renewals every half second, so the month that passes shows at once.
      builtinModules: false,
      // The demo's webhook receiver is on this machine: loopback targets are allowed here, explicitly
      // (a facilitator refuses them by default).
      // The dashboard (docs/dashboard.md): providers sign in with their API key, the agent operator with
      // the token printed below; plan actions are sent with the sellers' devnet keys.
      webhooks: { secretKeys: [webhookKey] },
      dashboard: {
        agents: agentDashboard({ store, token: dashboardToken }),
        planSigner: (provider) => {
          const account = devnet.accounts.find((a) => a.address.toLowerCase() === provider.toLowerCase());
          return account === undefined ? undefined : devnet.walletClient(account);
        },
      },
      modules: [
        ...builtinModules.map((m) =>
          m === webhooksModule
            ? createWebhooksModule({ allowTargets: ["127.0.0.0/8", "::1"], secretKeys: [webhookKey] })
            : m,
        ),
        // The subscription, metered and channel schemes' facilitator parts, the keeper's interval set.
        createSubscriptionsModule({ keeper: { intervalMs: 500 } }),
        channelsModule,
      ],
    });
    await facilitator.start();
    cleanups.push(() => facilitator.stop());
    const facilitatorServer: RunningServer = await serveApp(facilitator.app);
    cleanups.push(() => facilitatorServer.close());
    const market = await serveMarket({ store, clock: systemClock, logger });
    cleanups.push(() => market.close());
    print(`  devnet      ${devnet.rpcUrl} (chain ${devnet.chain.id})`);
    print(`  facilitator ${facilitatorServer.url}`);
    const dashboardUrl = `${facilitatorServer.url}/dashboard`;
    // Printed only once it answers, so the address shown is one that can be opened.
    await waitFor(signal, "the dashboard", async () => {
      const response = await fetch(`${dashboardUrl}/login`).catch(() => undefined);
      await response?.body?.cancel();
      return response?.ok === true ? true : undefined;
    });
    print(
      `  dashboard   ${dashboardUrl} (agent operator's token: ${dashboardToken}; up while the demo runs)`,
    );
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
    // The run's spend events, kept for the dashboard's agent views (latest run, spend by tool).
    const recording = startRunRecording(store, { agent: "researcher", clock: systemClock });
    const documents = (await loadDocuments()).slice(0, options.maxDocuments ?? Number.POSITIVE_INFINITY);
    let forecast: Record<string, number> = {};
    // The reseller buys from its suppliers while it serves a brief: show those purchases under it.
    let resellerShown = 0;
    const showResellerPurchases = () => {
      for (const event of marketplace.resellerSpend.slice(resellerShown)) {
        calls.line(`      ↳ reseller bought ${event.tool} from ${nameOf(event.provider)} → ${how(event)}`);
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
        recording.record(event);
        showResellerPurchases();
        calls.line(`    bought ${event.tool} from ${nameOf(event.provider)} → ${how(event)}`);
      },
    });
    // One capability is bought through its seller's MCP endpoint, listed in the market next to its HTTP route.
    const mcpConnections = createMcpConnections();
    cleanups.push(() => mcpConnections.close());
    const viaMcp = (
      await discoverTools({
        market: market.url,
        search: { q: MCP_TOOL },
        transport: "mcp",
        mcpConnections,
        agent: "researcher",
        payer,
        budget,
        calls: createCallCounter({ clock: systemClock }),
        forecast: (tool) =>
          forecast[tool] === undefined ? undefined : { calls: forecast[tool]!, horizonSeconds: 30 * 86_400 },
        onSpend: (event) => {
          spend.record(event);
          recording.record(event);
          calls.line(`    bought ${event.tool} from ${nameOf(event.provider)} over MCP → ${how(event)}`);
        },
      })
    ).filter((d) => d.tool.name === MCP_TOOL);
    discovered.splice(0, discovered.length, ...discovered.filter((d) => d.tool.name !== MCP_TOOL), ...viaMcp);
    for (const d of discovered) {
      print(
        `  ${d.tool.name.padEnd(16)} from ${d.seller}  ${d.capability.url}${viaMcp.includes(d) ? "  (over MCP)" : ""}`,
      );
    }
    const tools = discovered.filter((d) => d.tool.name !== "notarize").map((d) => d.tool);

    const model = modelFromEnv(env);
    const orchestrator = createOrchestrator({
      tools: calls.wrap(tools),
      model: model ?? "rules",
      // One call at a time per seller: the reseller's supplier purchases then belong to the one brief
      // it is serving, and are printed under it.
      queue: { perSellerConcurrency: 1 },
      onEvent: (event: OrchestratorEvent) => {
        if (event.type === "tool:start")
          calls.start(event.callId, `  → ${event.tool}${event.document ? ` (${event.document})` : ""}`);
        if (event.type === "tool:end") calls.end(event.step.callId);
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

    step(`A burst of ${BURST_CALLS} language checks, one per sentence, over a prepaid channel`);
    const linguist = marketplace.sellers.find((s) => s.name === "linguist");
    if (linguist === undefined) throw new Error("the linguist is not running");
    const sentences = documents.flatMap((d) => splitSentences(d.text)).filter((s) => s.length > 0);
    const channel = await runChannelBurst({
      devnet,
      facilitatorUrl: facilitatorServer.url,
      marketUrl: market.url,
      seller: linguist,
      agent: "researcher",
      account: researcher.account,
      payer,
      budget,
      tool: MCP_TOOL,
      texts: Array.from({ length: BURST_CALLS }, (_, i) => sentences[i % sentences.length]!),
      onSpend: (event) => {
        spend.record(event);
        recording.record(event);
        // The call that opened the channel says why; the rest are vouchers sent up front.
        if (event.reason !== undefined) progress(`    ${event.tool}: ${how(event)} — ${event.reason}`);
      },
    });
    print(
      `  ${channel.tool}: ${channel.channels} channel opened (deposit ${usdc(channel.deposit)}), ${channel.calls} calls paid by voucher for ${usdc(channel.spent)}; the linguist claimed ${usdc(channel.claimed)} and closed it, ${usdc(channel.returned)} returned to the wallet and the budget`,
    );

    const notarize = discovered.find((d) => d.tool.name === "notarize");
    if (notarize !== undefined) {
      step("Notarizing the report on chain");
      const content = await notarize.tool.invoke({ text: run.answer });
      print(notarizedLine(content));
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
    print(`  on chain the agent paid ${usdc(agentPaidOnChain)}; its ledger records ${usdc(ledgerSpent)}`);

    step("Spend report");
    await recording.finish();
    const report = spend.report();
    const reportLines = formatSpendReport(report)
      .split("\n")
      .map((l) => `  ${l}`);
    for (const line of withForecastNotes(reportLines, report, limits.perCall)) print(line);
    const overMcp = viaMcp.map((d) => {
      const bought = report.tools.find((t) => t.tool === d.tool.name);
      return {
        tool: d.tool.name,
        url: d.capability.url,
        calls: bought?.calls ?? 0,
        amount: bought?.amount ?? 0n,
      };
    });
    for (const m of overMcp) {
      print(`  over MCP: ${m.tool} at ${m.url}, ${m.calls} calls for ${usdc(m.amount)}`);
    }
    const after = await budget.report("researcher");
    for (const line of budgetLines("researcher", limits.total, after)) print(line);
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
    if (options.keep === true && signal !== undefined) {
      const summarizer = marketplace.sellers.find((s) => s.name === "summarizer");
      print(`\nThe dashboard stays up at ${facilitatorServer.url}/dashboard until Ctrl-C.`);
      print(`  agent operator: the token ${dashboardToken}`);
      if (summarizer !== undefined) print(`  provider (summarizer): its devnet API key ${summarizer.apiKey}`);
      await new Promise<void>((resolve) => {
        if (signal.aborted) resolve();
        else signal.addEventListener("abort", () => resolve(), { once: true });
      });
    } else {
      print(
        `\nThe dashboard at ${dashboardUrl} stops with the demo; \`npm run demo -- --keep\` keeps it up until Ctrl-C.`,
      );
    }
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
      overMcp,
      channel,
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
