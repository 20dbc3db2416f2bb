/**
 * The main job (`npm run demo`): everything on embedded defaults — an anvil devnet, PGlite, the
 * facilitator, the market, five specialist sellers — and a research agent that discovers their paid
 * endpoints, buys them under a budget (subscribing or paying once as its policy decides) and reports
 * what it spent; then a month passes on chain, the keeper renews the subscriptions, and the providers'
 * webhook receiver shows the events it got.
 *
 * It is told as a story: each step (`▶`) says what happens next, then its lines say what happened.
 */
import type { Address } from "viem";
import { type BudgetLedger, createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type RunRecording, startRunRecording } from "../src/agent/dashboard/runSpendRecords.ts";
import { type DiscoveredTool, discoverTools } from "../src/agent/discoverTools.ts";
import { createMcpConnections } from "../src/agent/mcp/mcpConnections.ts";
import { createOrchestrator, type OrchestratorRun } from "../src/agent/orchestrator/createOrchestrator.ts";
import { modelFromEnv } from "../src/agent/orchestrator/modelFromEnv.ts";
import type { OrchestratorEvent } from "../src/agent/orchestrator/orchestratorEvent.ts";
import type { PlannerDocument } from "../src/agent/planner/plannerInputs.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import {
  createSpendCollector,
  formatSpendReport,
  type SpendCollector,
  type SpendEvent,
  type SpendReport,
} from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import { formatUnitsExact, parseUnitsExact } from "../src/protocol/amount.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type ChannelBurstResult, runChannelBurst } from "./channelBurst.ts";
import { type CallBlocks, createCallBlocks } from "./demoCallBlocks.ts";
import { budgetLines, notarizedLine, withForecastNotes } from "./demoReportLines.ts";
import {
  type Cleanups,
  type DemoServices,
  type ReceivedEvent,
  startServices,
  startWebhookReceiver,
  waitFor,
} from "./demoServices.ts";
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

/** How the demo tells what happens, shared by its steps. */
type Story = {
  print: (line: string) => void;
  /** Progress lines stop once interrupted: calls cut short by the stop are not purchases to report. */
  progress: (line: string) => void;
  /** Starts a step; each first checks for an interrupt, so Ctrl-C between steps stops at once. */
  step: (text: string) => void;
  signal: AbortSignal | undefined;
  /** Calls of the task run at once; each one's lines are printed together when it ends. */
  calls: CallBlocks;
  /** Addresses the story names (sellers, the researcher). */
  names: Map<string, string>;
};

const usdc = (v: bigint) => `${formatUnitsExact(v)} USDC`;

/** How one call was paid: the mode and what it cost, or that a subscription already paid covered it. */
function how(event: SpendEvent): string {
  if (!event.ok) return `failed: ${event.error}`;
  if (event.amount > 0n) return `${event.mode} ${usdc(event.amount)}`;
  return event.mode === "subscription" ? "subscription (covered, nothing to pay)" : event.mode;
}

function nameOf(story: Story, address: string): string {
  return story.names.get(address.toLowerCase()) ?? address;
}

function createStory(options: DemoOptions): Story {
  const print = options.print ?? ((line: string) => process.stdout.write(`${line}\n`));
  const signal = options.signal;
  const progress = (line: string) => {
    if (signal?.aborted !== true) print(line);
  };
  return {
    print,
    progress,
    step: (text) => {
      signal?.throwIfAborted();
      print(`\n▶ ${text}`);
    },
    signal,
    calls: createCallBlocks(progress),
    names: new Map(),
  };
}

export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const story = createStory(options);
  const cleanups: Cleanups = [];
  try {
    const { services, receiver, marketplace } = await startEverything(story, options.env ?? {}, cleanups);
    const agent = await discoverResearch(story, services, marketplace, options, cleanups);
    const { run, before } = await runTask(story, services, agent, options.env ?? {});
    const channel = await channelBurstStep(story, services, marketplace, agent);
    await notarizeStep(story, agent, run);
    const settled = await settleStep(story, services, marketplace, agent, before);
    const { report, overMcp } = await reportStep(story, agent, marketplace);
    const renewed = await renewalsStep(story, services, receiver, agent.researcher.address);
    webhooksStep(story, receiver.events);
    await closingStep(story, options, services, marketplace, run);
    return {
      report,
      resellerSpend: marketplace.resellerSpend,
      ...settled,
      ...renewed,
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
    const patience = story.signal?.aborted === true ? 3_000 : undefined;
    for (const cleanup of cleanups.reverse()) await withPatience(cleanup(), patience).catch(() => undefined);
  }
}

type Receiver = Awaited<ReturnType<typeof startWebhookReceiver>>;

/** The first two steps: the services, then the sellers registered with them. */
async function startEverything(
  story: Story,
  env: Record<string, string | undefined>,
  cleanups: Cleanups,
): Promise<{ services: DemoServices; receiver: Receiver; marketplace: Marketplace }> {
  const { print } = story;
  story.step("Starting the devnet (anvil), embedded PGlite, the facilitator and the market");
  const services = await startServices(env, story.signal, cleanups);
  print(`  devnet      ${services.devnet.rpcUrl} (chain ${services.devnet.chain.id})`);
  print(`  facilitator ${services.facilitatorUrl}`);
  print(
    `  dashboard   ${services.dashboardUrl} (agent operator's token: ${services.dashboardToken}; up while the demo runs)`,
  );
  print(`  market      ${services.marketUrl}`);
  const webhookSecrets: string[] = [];
  const receiver = await startWebhookReceiver(() => webhookSecrets);
  cleanups.push(() => receiver.close());

  story.step("Starting the specialist sellers and registering them with the facilitator and the market");
  const marketplace: Marketplace = await startMarketplace({
    devnet: services.devnet,
    facilitatorUrl: services.facilitatorUrl,
    facilitatorSigner: services.gasAccount.address,
    marketUrl: services.marketUrl,
    store: services.store,
    webhookUrl: receiver.url,
    onWebhookSecret: (secret) => webhookSecrets.push(secret),
    onSeller: (seller) => {
      story.names.set(seller.account.address.toLowerCase(), seller.name);
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
  return { services, receiver, marketplace };
}

/** The research agent as the later steps use it: its account, budget, payer, tools and records. */
type ResearchAgent = {
  researcher: DemoServices["devnet"]["accounts"][number];
  budget: BudgetLedger;
  limits: { total: bigint; daily: bigint; perCall: bigint; maxSubscriptionCommitment: bigint };
  payer: Payer;
  spend: SpendCollector;
  recording: RunRecording;
  documents: PlannerDocument[];
  discovered: DiscoveredTool[];
  viaMcp: DiscoveredTool[];
  /** Set once the task's plan is made: the calls the policy weighs each tool's choices for. */
  setForecast(forecast: Record<string, number>): void;
};

async function discoverResearch(
  story: Story,
  services: DemoServices,
  marketplace: Marketplace,
  options: DemoOptions,
  cleanups: Cleanups,
): Promise<ResearchAgent> {
  story.step("The research agent discovers paid tools in the market");
  const { devnet, store } = services;
  const researcher = devnet.accounts[demoAccounts.researcher]!;
  story.names.set(researcher.address.toLowerCase(), "researcher");
  const budget = createBudgetLedger({ store, clock: systemClock });
  const limits = {
    total: parseUnitsExact("5"),
    daily: parseUnitsExact("5"),
    perCall: parseUnitsExact("0.5"),
    maxSubscriptionCommitment: parseUnitsExact("1"),
  };
  await budget.setLimits("researcher", limits);
  story.print(
    `  budget for "researcher": total ${usdc(limits.total)}, per call ${usdc(limits.perCall)}, subscriptions ≤ ${usdc(limits.maxSubscriptionCommitment)}`,
  );
  const payer = createPayer({
    account: researcher.account,
    network: devnet.network,
    facilitator: services.facilitatorUrl,
  });
  const spend = createSpendCollector();
  // The run's spend events, kept for the dashboard's agent views (latest run, spend by tool).
  const recording = startRunRecording(store, { agent: "researcher", clock: systemClock });
  const documents = (await loadDocuments()).slice(0, options.maxDocuments ?? Number.POSITIVE_INFINITY);
  let forecast: Record<string, number> = {};
  const shared = {
    market: services.marketUrl,
    agent: "researcher",
    payer,
    budget,
    forecast: (tool: string) =>
      forecast[tool] === undefined ? undefined : { calls: forecast[tool]!, horizonSeconds: 30 * 86_400 },
  };
  const showResellerPurchases = resellerPurchases(story, marketplace);
  const discovered = await discoverTools({
    ...shared,
    calls: createCallCounter({ clock: systemClock }),
    onSpend: (event) => {
      spend.record(event);
      recording.record(event);
      showResellerPurchases();
      story.calls.line(`    bought ${event.tool} from ${nameOf(story, event.provider)} → ${how(event)}`);
    },
  });
  // One capability is bought through its seller's MCP endpoint, listed in the market next to its HTTP route.
  const mcpConnections = createMcpConnections();
  cleanups.push(() => mcpConnections.close());
  const viaMcp = (
    await discoverTools({
      ...shared,
      search: { q: MCP_TOOL },
      transport: "mcp",
      mcpConnections,
      calls: createCallCounter({ clock: systemClock }),
      onSpend: (event) => {
        spend.record(event);
        recording.record(event);
        story.calls.line(
          `    bought ${event.tool} from ${nameOf(story, event.provider)} over MCP → ${how(event)}`,
        );
      },
    })
  ).filter((d) => d.tool.name === MCP_TOOL);
  discovered.splice(0, discovered.length, ...discovered.filter((d) => d.tool.name !== MCP_TOOL), ...viaMcp);
  for (const d of discovered) {
    story.print(
      `  ${d.tool.name.padEnd(16)} from ${d.seller}  ${d.capability.url}${viaMcp.includes(d) ? "  (over MCP)" : ""}`,
    );
  }
  const setForecast = (next: Record<string, number>) => {
    forecast = next;
  };
  return { researcher, budget, limits, payer, spend, recording, documents, discovered, viaMcp, setForecast };
}

/** The reseller buys from its suppliers while it serves a brief: files those purchases under the brief. */
function resellerPurchases(story: Story, marketplace: Marketplace): () => void {
  let shown = 0;
  return () => {
    for (const event of marketplace.resellerSpend.slice(shown)) {
      story.calls.line(
        `      ↳ reseller bought ${event.tool} from ${nameOf(story, event.provider)} → ${how(event)}`,
      );
    }
    shown = marketplace.resellerSpend.length;
  };
}

/** The task, planned and run; `before` is the researcher's balance before it, for the settling step. */
async function runTask(
  story: Story,
  services: DemoServices,
  agent: ResearchAgent,
  env: Record<string, string | undefined>,
): Promise<{ run: OrchestratorRun; before: bigint }> {
  const { calls } = story;
  const model = modelFromEnv(env);
  const orchestrator = createOrchestrator({
    tools: calls.wrap(agent.discovered.filter((d) => d.tool.name !== "notarize").map((d) => d.tool)),
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
  const forecast = orchestrator.forecast(DEMO_TASK, { documents: agent.documents });
  agent.setForecast(forecast);
  story.step(
    `Running the task with the ${orchestrator.planner === "rules" ? "rule planner (offline)" : `model ${orchestrator.planner}`}: "${DEMO_TASK}"`,
  );
  story.print(
    `  forecast of calls per tool: ${Object.entries(forecast)
      .map(([t, n]) => `${t}×${n}`)
      .join(", ")}`,
  );
  const before = await balanceOf(services, agent.researcher.address);
  const run = await orchestrator.run(DEMO_TASK, { documents: agent.documents }, { signal: story.signal });
  return { run, before };
}

function balanceOf(services: DemoServices, owner: Address): Promise<bigint> {
  return getTokenBalance(services.devnet.publicClient, { token: services.devnet.contracts.usd, owner });
}

async function channelBurstStep(
  story: Story,
  services: DemoServices,
  marketplace: Marketplace,
  agent: ResearchAgent,
): Promise<ChannelBurstResult> {
  story.step(`A burst of ${BURST_CALLS} language checks, one per sentence, over a prepaid channel`);
  const linguist = marketplace.sellers.find((s) => s.name === "linguist");
  if (linguist === undefined) throw new Error("the linguist is not running");
  const sentences = agent.documents.flatMap((d) => splitSentences(d.text)).filter((s) => s.length > 0);
  const channel = await runChannelBurst({
    devnet: services.devnet,
    facilitatorUrl: services.facilitatorUrl,
    marketUrl: services.marketUrl,
    seller: linguist,
    agent: "researcher",
    account: agent.researcher.account,
    payer: agent.payer,
    budget: agent.budget,
    tool: MCP_TOOL,
    texts: Array.from({ length: BURST_CALLS }, (_, i) => sentences[i % sentences.length]!),
    onSpend: (event) => {
      agent.spend.record(event);
      agent.recording.record(event);
      // The call that opened the channel says why; the rest are vouchers sent up front.
      if (event.reason !== undefined) story.progress(`    ${event.tool}: ${how(event)} — ${event.reason}`);
    },
  });
  story.print(
    `  ${channel.tool}: ${channel.channels} channel opened (deposit ${usdc(channel.deposit)}), ${channel.calls} calls paid by voucher for ${usdc(channel.spent)}; the linguist claimed ${usdc(channel.claimed)} and closed it, ${usdc(channel.returned)} returned to the wallet and the budget`,
  );
  return channel;
}

async function notarizeStep(story: Story, agent: ResearchAgent, run: OrchestratorRun): Promise<void> {
  const notarize = agent.discovered.find((d) => d.tool.name === "notarize");
  if (notarize === undefined) return;
  story.step("Notarizing the report on chain");
  const content = await notarize.tool.invoke({ text: run.answer });
  story.print(notarizedLine(content));
}

/** Metered usage is recorded by the gate and deducted on chain in batches: waits until it has landed. */
async function settleStep(
  story: Story,
  services: DemoServices,
  marketplace: Marketplace,
  agent: ResearchAgent,
  before: bigint,
): Promise<{ ledgerSpent: bigint; agentPaidOnChain: bigint }> {
  story.step("Waiting for metered usage to settle on chain");
  for (const seller of marketplace.sellers) await seller.specialist.flushUsage();
  const ledgerSpent = (await agent.budget.report("researcher")).spent.total;
  const paid = async () => before - (await balanceOf(services, agent.researcher.address));
  const agentPaidOnChain = await waitFor(story.signal, "metered usage to settle", async () => {
    const now = await paid();
    return now >= ledgerSpent ? now : undefined;
  }).catch(paid);
  story.print(`  on chain the agent paid ${usdc(agentPaidOnChain)}; its ledger records ${usdc(ledgerSpent)}`);
  return { ledgerSpent, agentPaidOnChain };
}

async function reportStep(
  story: Story,
  agent: ResearchAgent,
  marketplace: Marketplace,
): Promise<{ report: SpendReport; overMcp: DemoResult["overMcp"] }> {
  story.step("Spend report");
  await agent.recording.finish();
  const report = agent.spend.report();
  const reportLines = formatSpendReport(report)
    .split("\n")
    .map((l) => `  ${l}`);
  for (const line of withForecastNotes(reportLines, report)) story.print(line);
  const overMcp = agent.viaMcp.map((d) => {
    const bought = report.tools.find((t) => t.tool === d.tool.name);
    return {
      tool: d.tool.name,
      url: d.capability.url,
      calls: bought?.calls ?? 0,
      amount: bought?.amount ?? 0n,
    };
  });
  for (const m of overMcp) {
    story.print(`  over MCP: ${m.tool} at ${m.url}, ${m.calls} calls for ${usdc(m.amount)}`);
  }
  const after = await agent.budget.report("researcher");
  for (const line of budgetLines("researcher", agent.limits.total, after)) story.print(line);
  const resold = marketplace.resellerSpend.filter((e) => e.ok);
  story.print(
    `  agent-to-agent: the reseller bought ${resold.length} results from its suppliers for ${usdc(resold.reduce((s, e) => s + e.amount, 0n))}`,
  );
  return { report, overMcp };
}

async function renewalsStep(
  story: Story,
  services: DemoServices,
  receiver: Receiver,
  researcher: Address,
): Promise<{ renewals: number; researcherRenewals: bigint; researcherRenewedOnChain: bigint }> {
  story.step("A month passes on chain; the facilitator's keeper collects the renewals");
  const created = receiver.events.filter((e) => e.type === "subscription.created");
  const beforeRenewal = await balanceOf(services, researcher);
  const chainTime = await services.devnet.advanceTime(30 * 86_400 + 60);
  story.print(`  chain time is now ${new Date(Number(chainTime) * 1000).toISOString().slice(0, 10)}`);
  // Every subscription created above comes due; wait until the keeper has collected each of them.
  const renewed = await waitFor(story.signal, "the keeper's renewals", async () => {
    const events = receiver.events.filter((e) => e.type === "subscription.renewed");
    return events.length >= created.length ? events : undefined;
  });
  let researcherRenewals = 0n;
  for (const e of renewed) {
    const amount = BigInt(String(e.data.amount));
    const subscriber = String(e.data.subscriber);
    if (subscriber.toLowerCase() === researcher.toLowerCase()) researcherRenewals += amount;
    story.print(
      `  subscription #${e.data.subscriptionId} (plan #${e.data.planId}): ${nameOf(story, subscriber)} paid ${nameOf(story, String(e.data.provider))} ${usdc(amount)} for the next 30 days`,
    );
  }
  const researcherRenewedOnChain = beforeRenewal - (await balanceOf(services, researcher));
  story.print(
    `  on chain the researcher's balance fell by ${usdc(researcherRenewedOnChain)}; its renewals add up to ${usdc(researcherRenewals)}`,
  );
  return { renewals: renewed.length, researcherRenewals, researcherRenewedOnChain };
}

function webhooksStep(story: Story, events: readonly ReceivedEvent[]): void {
  story.step("Webhook events the providers received (signatures verified, duplicates dropped)");
  const counts = new Map<string, Map<string, number>>();
  for (const e of events) {
    const provider = nameOf(story, String(e.data.provider ?? e.data.payTo ?? "unknown"));
    const byType = counts.get(provider) ?? new Map<string, number>();
    byType.set(e.type, (byType.get(e.type) ?? 0) + 1);
    counts.set(provider, byType);
  }
  for (const [provider, byType] of [...counts].sort(([a], [b]) => a.localeCompare(b))) {
    const listed = [...byType]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([type, n]) => `${type} ×${n}`)
      .join(", ");
    story.print(`  ${provider.padEnd(10)} ${listed}`);
  }
}

/** The answer's first lines, then the dashboard: kept up until Ctrl-C with `keep`, else it stops now. */
async function closingStep(
  story: Story,
  options: DemoOptions,
  services: DemoServices,
  marketplace: Marketplace,
  run: OrchestratorRun,
): Promise<void> {
  const { print, signal } = story;
  const lines = run.answer.split("\n");
  const shown = 12;
  print(`\nAnswer (${run.planner}), first ${Math.min(shown, lines.length)} of ${lines.length} lines:`);
  print(lines.slice(0, shown).join("\n"));
  if (options.keep !== true || signal === undefined) {
    print(
      `\nThe dashboard at ${services.dashboardUrl} stops with the demo; \`npm run demo -- --keep\` keeps it up until Ctrl-C.`,
    );
    return;
  }
  const summarizer = marketplace.sellers.find((s) => s.name === "summarizer");
  print(`\nThe dashboard stays up at ${services.dashboardUrl} until Ctrl-C.`);
  print(`  agent operator: the token ${services.dashboardToken}`);
  if (summarizer !== undefined) print(`  provider (summarizer): its devnet API key ${summarizer.apiKey}`);
  await new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
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
