/**
 * `tollgate run <task | script.ts>`: runs an orchestrator as a named agent. The agent's budget comes
 * from the agent runtime's store (the ledger `tollgate budget set` writes), its tools are discovered
 * in the market and paid through the facilitator, and the spend report is printed at the end.
 * A `.ts`/`.js` argument runs that script's exported `main(context)` with the same tools instead.
 * Prepaid channels the policy opens are kept in `<dir>/channels-<agent>.journal`: a run first takes back
 * the deposits of channels whose close delay is over, closes channels idle for 10 minutes while it lasts,
 * and closes every channel at its end (`--keep-channels` keeps them for the next run); docs/channels.md.
 */
import { existsSync, readFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import type { StructuredToolInterface } from "@langchain/core/tools";
import type { Logger } from "pino";
import { createPublicClient, type PublicClient } from "viem";
import { z } from "zod";
import { approvalFor, getApprovalThreshold } from "../../agent/budget/approvalThreshold.ts";
import type { BudgetReport } from "../../agent/budget/budgetReport.ts";
import { type BudgetLedger, createBudgetLedger } from "../../agent/budget/createBudgetLedger.ts";
import { resolvePendingPayments } from "../../agent/budget/pendingPayments.ts";
import { startRunRecording } from "../../agent/dashboard/runSpendRecords.ts";
import { type DiscoveredTool, type DiscoverToolsOptions, discoverTools } from "../../agent/discoverTools.ts";
import { createOrchestrator, type Orchestrator } from "../../agent/orchestrator/createOrchestrator.ts";
import { modelFromEnv } from "../../agent/orchestrator/modelFromEnv.ts";
import type { OrchestratorStep } from "../../agent/orchestrator/runToolCall.ts";
import { approvalHook } from "../../agent/orchestrator/spendApproval.ts";
import type { Plan } from "../../agent/planner/plan.ts";
import type { PlannerDocument, PlannerInputs } from "../../agent/planner/plannerInputs.ts";
import { createCancelClaims } from "../../agent/policy/cancelUnneededSubscriptions.ts";
import { createCallCounter } from "../../agent/policy/createCallCounter.ts";
import { createDemandHistory, type DemandHistory } from "../../agent/policy/createDemandHistory.ts";
import {
  createSpendCollector,
  formatSpendReport,
  type SpendEvent,
  type SpendReport,
} from "../../agent/spendReport.ts";
import { readDevnetFile } from "../../chain/devnetFile.ts";
import { rpcTransport } from "../../chain/rpcTransport.ts";
import { RpcUrlsSchema } from "../../chain/rpcUrls.ts";
import { privateKeyAccount } from "../../chain/signers/privateKeyAccount.ts";
import { createPayer, type Payer } from "../../client/createPayer.ts";
import {
  createFacilitatorClient,
  type FacilitatorClient,
  type FetchFn,
} from "../../http/facilitatorClient.ts";
import { DEFAULT_MARKET_URL } from "../../market/marketApi.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { MAX_CHANNEL_CLOSE_DELAY } from "../../protocol/channels.ts";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { NetworkSchema } from "../../protocol/network.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import {
  type AgentChannels,
  type ChannelSettlement,
  createAgentChannels,
} from "../../schemes/channel/agent/channelCommitments.ts";
import { createSubscriptionKeeper } from "../../schemes/subscription/agent/createSubscriptionKeeper.ts";
import { cancelUnneededAfterRun } from "../../schemes/subscription/agent/heldSubscriptions.ts";
import type { SubscriptionKeeper } from "../../schemes/subscription/agent/subscriptionKeeperTypes.ts";
import {
  type SubscriptionWatcher,
  watchSubscriptions,
} from "../../schemes/subscription/agent/watchSubscriptions.ts";
import type { Store } from "../../store/store.ts";
import { createCliLogger, logFormatFor } from "../cliLogger.ts";
import { openAgentStore } from "../openAgentStore.ts";
import { createLinePrompt } from "../promptLine.ts";
import { createRunChannels, type RunChannels } from "../run/runChannels.ts";
import { DEFAULT_FACILITATOR_URL } from "./analytics.ts";
import type { CommandOutput } from "./budget.ts";

export const summary = "<task | script.ts> [--agent researcher] — run an orchestrator on an agent's budget";

const DEFAULT_AGENT = "researcher";
/**
 * The dev account an agent pays from on `tollgate devnet up` when none is named: the README's role
 * table gives account 4 to the agent (1 is the API provider, 2 its client, 3 a seller).
 */
const DEFAULT_DEVNET_ACCOUNT = 4;
/** Failure codes that mean the agent's own limits refused the spend before anything was paid. */
const BUDGET_REFUSALS: ReadonlySet<string> = new Set(["BudgetExceeded", "ApprovalDenied"]);

const usage = `usage: tollgate run <task | script.ts> [--agent ${DEFAULT_AGENT}] [--market ${DEFAULT_MARKET_URL}]
                    [--facilitator ${DEFAULT_FACILITATOR_URL}] [--key 0x… | --account <devnet index>]
                    [--text "…" … | --document <file> …] [--dir .tollgate] [--json]
                    [--approvals ask|refuse] [--keep-channels] [--max-close-delay 86400]
                    [--model-timeout-ms 15000]
  Runs an orchestrator as <agent>: its budget is the one \`tollgate budget set <agent>\` stored, its
  tools are what the market lists, paid through the facilitator. Prints the answer and the spend report.
  One --text is the text to work on; several are kept, each a document (text-1, text-2, …).
  Exits 1 when a tool call of the task failed and was not made good (the answer is incomplete).
  A .ts/.js argument runs that script's exported \`main(context)\` with the same tools instead (a script
  reports failure by throwing).
channels: prepaid channels the policy opens are closed at the end of the run (the unspent deposit is
  released from the budget at once and returns to the wallet after the channel's close delay: the next
  run, or \`tollgate channel withdraw\`, takes it back); --keep-channels keeps them open for the next run;
  --max-close-delay (seconds, default one day) refuses sellers whose channels would lock a deposit longer
key: --key, TOLLGATE_AGENT_KEY, or a devnet account (--account, default ${DEFAULT_DEVNET_ACCOUNT}: the agent) from <dir>/devnet.json
approvals: spends above the agent's --approve-above (tollgate budget set) need a yes: asked on the
  terminal (--approvals ask, the default when stdin is one; answers are read from stdin), refused otherwise
environment: TOLLGATE_DIR DATABASE_URL TOLLGATE_MARKET_URL TOLLGATE_FACILITATOR_URL TOLLGATE_AGENT_KEY
             OPENAI_API_KEY OPENAI_BASE_URL OPENAI_MODEL TOLLGATE_PLANNER (rules without a key)
             TOLLGATE_MODEL_TIMEOUT_MS (how long a model request may wait; default 15000, or --model-timeout-ms)
             LOG_LEVEL (the agent's log on stderr; default warn) LOG_FORMAT (json or pretty: human lines
             when stdout and stderr are terminals, JSON lines otherwise)
             TOLLGATE_RPC_URL (a node of the agent's chain, or several, comma-separated, tried in order:
             renewals and overage of its subscriptions are read into its budget at the start and end of a
             run; default the devnet's when on it)`;

/** `--max-close-delay`: whole seconds, at most the contract's 30 days. */
const MaxCloseDelaySchema = z.coerce.number().int().nonnegative().max(MAX_CHANNEL_CLOSE_DELAY);

/** `--model-timeout-ms`: a whole number of milliseconds. */
const ModelTimeoutSchema = z.coerce.number().int().positive();

const PrivateKeySchema = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, { error: "expected a 0x-prefixed 32-byte private key" })
  .transform((key) => key as `0x${string}`);

const RunEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  DATABASE_URL: z.string().optional(),
  TOLLGATE_MARKET_URL: z.url({ protocol: /^https?$/ }).optional(),
  TOLLGATE_FACILITATOR_URL: z.url({ protocol: /^https?$/ }).optional(),
  TOLLGATE_AGENT_KEY: PrivateKeySchema.optional(),
  /** A node of the agent's chain, to watch its subscriptions (default: the devnet's, when it is on it). */
  TOLLGATE_RPC_URL: RpcUrlsSchema.optional(),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("warn"),
});

const ScriptPattern = /\.(?:ts|mts|js|mjs)$/;

/** What a script's `main` receives: the agent's discovered paid tools and what they spend from. */
export type RunContext = {
  agent: string;
  tools: StructuredToolInterface[];
  discovered: DiscoveredTool[];
  /** An orchestrator over the tools, with the model from the environment (or the rule planner). */
  orchestrator: Orchestrator;
  budget: BudgetLedger;
  payer: Payer;
  /** The agent's prepaid channels (its tools pay through them; closed at the end of the run). */
  channels: AgentChannels;
  /** Where the script's progress lines go. */
  print: (line: string) => void;
  signal: AbortSignal | undefined;
};

/** A script run by `tollgate run script.ts`: whatever text it returns is printed as its answer. */
export type RunScript = { main(context: RunContext): Promise<unknown> | unknown };

export type RunCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  fetch: FetchFn;
  clock: Clock;
  cwd: string;
  signal?: AbortSignal | undefined;
  /** Answers a spend-approval question (a line: "y" approves); see `--approvals`. */
  ask?: ((question: string) => Promise<string>) | undefined;
  /** Whether `ask` reaches a person (a terminal): the default of `--approvals`. */
  interactive?: boolean | undefined;
  /** Where a streaming model's tokens go as they arrive (not with --json). */
  stream?: ((text: string) => void) | undefined;
  /**
   * The agent's structured log (paid tools, policy decisions, orchestrator). Default: pino at
   * `LOG_LEVEL` (warn) on stderr, so stdout keeps the run's own output (and `--json`) unmixed.
   */
  logger?: Logger | undefined;
  /** Whether stdout and stderr are terminals: the default log is then human lines (cliLogger.ts). */
  terminal?: { stdout: boolean; stderr: boolean } | undefined;
  /**
   * How often the run's subscription watcher looks (default 60 s; sooner when a cancel window opens
   * sooner): it records renewals and deductions and cancels, before it renews, a subscription the
   * running forecast no longer justifies, during the run and not only at its end.
   */
  watchIntervalMs?: number | undefined;
};

/** A tool call of a task run that failed and was not made good by a later call. */
export type RunFailure = { tool: string; document?: string | undefined; error: string };

/** The outcome `tollgate run --json` prints. */
export type RunOutcome = {
  /** Channels closed at the end of the run (their holds released). */
  channels?: ChannelSettlement[] | undefined;
  agent: string;
  planner: string;
  answer: string;
  /** false when a tool call failed for good: the command then exits 1. */
  done: boolean;
  failures: RunFailure[];
  report: SpendReport;
  budget: BudgetReport;
};

const usdc = (amount: bigint) => `${formatUnitsExact(amount)} USDC`;

/**
 * The task's inputs. Every `--text` is kept: one is the text to work on; several become documents
 * `text-1`, `text-2`, … (beside any `--document`), so none is silently dropped.
 */
function readInputs(
  values: { text?: string[] | undefined; document?: string[] | undefined },
  cwd: string,
): PlannerInputs {
  const texts = values.text ?? [];
  const documents: PlannerDocument[] = (values.document ?? []).map((path) => {
    const file = resolve(cwd, path);
    if (!existsSync(file)) throw new TollgateError("InvalidRequest", `no such document: ${file}`);
    return { id: basename(file).replace(/\.[^.]+$/, ""), text: readFileSync(file, "utf8") };
  });
  if (texts.some((text) => text.trim() === "")) {
    throw new TollgateError("InvalidRequest", "--text is empty");
  }
  if (texts.length > 1) documents.push(...texts.map((text, i) => ({ id: `text-${i + 1}`, text })));
  return {
    ...(documents.length > 0 ? { documents } : {}),
    ...(texts.length === 1 ? { text: texts[0] } : {}),
  };
}

/**
 * Failed steps no later step made good: a call of the same tool on the same document that succeeded
 * (a model may retry after an error; the rule planner does not).
 */
function unrecoveredFailures(steps: readonly OrchestratorStep[]): RunFailure[] {
  return steps
    .filter(
      (step, i) =>
        step.error !== undefined &&
        !steps
          .slice(i + 1)
          .some(
            (later) =>
              later.error === undefined && later.tool === step.tool && later.document === step.document,
          ),
    )
    .map((step) => ({
      tool: step.tool,
      ...(step.document === undefined ? {} : { document: step.document }),
      error: step.error!,
    }));
}

/** What the rule planner could not even try: no tool matched the task, or a chosen tool lacked input. */
function planFailures(plan: Plan | undefined): RunFailure[] {
  if (plan === undefined) return [];
  if (plan.chosen.length === 0) return [{ tool: "(none)", error: "no tool in the market matches this task" }];
  return plan.skipped.map((skip) => ({ tool: skip.tool, error: `not called: ${skip.reason}` }));
}

/** How a spend event reads in the progress lines: a refusal by the budget is not a purchase. */
function describeSpend(event: SpendEvent): string {
  if (event.ok)
    return `bought ${event.tool} → ${event.mode}${event.amount > 0n ? ` ${usdc(event.amount)}` : ""}`;
  const paid = event.amount > 0n ? `${usdc(event.amount)} paid` : "nothing paid";
  if (event.error !== undefined && BUDGET_REFUSALS.has(event.error)) {
    return `${event.tool} → refused by the budget: ${paid} (${event.error})`;
  }
  return `${event.tool} → failed: ${event.error ?? "unknown error"}, ${paid}`;
}

/** JSON-safe: amounts as decimal strings of the smallest unit, as on the wire. */
function toJson(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v)));
}

function parseRunArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      agent: { type: "string", default: DEFAULT_AGENT },
      market: { type: "string" },
      facilitator: { type: "string" },
      key: { type: "string" },
      account: { type: "string" },
      network: { type: "string" },
      text: { type: "string", multiple: true },
      document: { type: "string", multiple: true },
      dir: { type: "string" },
      json: { type: "boolean", default: false },
      approvals: { type: "string" },
      "keep-channels": { type: "boolean", default: false },
      "max-close-delay": { type: "string" },
      "model-timeout-ms": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
}

type RunValues = ReturnType<typeof parseRunArgs>["values"];

/** What every part of one run reads: its arguments, environment, output and the agent's store. */
type RunSession = {
  deps: RunCommandDeps;
  values: RunValues;
  env: z.infer<typeof RunEnvSchema>;
  target: string;
  agent: string;
  dir: string;
  logger: Logger;
  print: (line: string) => void;
  store: Store;
};

/** Who pays for the run, through which facilitator, on which network. */
type RunWallet = {
  account: ReturnType<typeof privateKeyAccount>;
  accountSource: string | undefined;
  facilitator: FacilitatorClient;
  network: string;
};

/** The agent's account: `--key`, TOLLGATE_AGENT_KEY, or a devnet account (default the agent's). */
function runAccount(
  values: RunValues,
  env: z.infer<typeof RunEnvSchema>,
  dir: string,
): Pick<RunWallet, "account" | "accountSource"> {
  if (values.key !== undefined) {
    return {
      account: privateKeyAccount(parseWire(PrivateKeySchema, values.key, { what: "--key" })),
      accountSource: undefined,
    };
  }
  if (values.account === undefined && env.TOLLGATE_AGENT_KEY !== undefined) {
    return { account: privateKeyAccount(env.TOLLGATE_AGENT_KEY), accountSource: undefined };
  }
  const devnet = readDevnetFile(dir);
  if (devnet === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `no key for agent "${values.agent}": pass --key, set TOLLGATE_AGENT_KEY, or run \`tollgate devnet up\``,
    );
  }
  const index = values.account === undefined ? DEFAULT_DEVNET_ACCOUNT : Number(values.account);
  const entry = Number.isInteger(index) ? devnet.accounts[index] : undefined;
  if (entry === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `--account must be a devnet account index from 0 to ${devnet.accounts.length - 1}` +
        (values.account === undefined ? ` (the default, ${DEFAULT_DEVNET_ACCOUNT}, is the agent's)` : ""),
    );
  }
  return {
    account: privateKeyAccount(parseWire(PrivateKeySchema, entry.privateKey, { what: "devnet key" })),
    accountSource: `devnet account ${index}`,
  };
}

/**
 * Spend approval (docs/agents.md "Approvals"): asked on the terminal (or the answer source
 * `--approvals ask` names), refused when no one can answer. Returns the yes/no question.
 */
function approvalQuestion(session: RunSession): (question: string) => Promise<boolean> {
  const { values, deps } = session;
  const approvals = values.approvals ?? (deps.interactive === true ? "ask" : "refuse");
  if (approvals !== "ask" && approvals !== "refuse") {
    throw new TollgateError("InvalidRequest", `--approvals must be "ask" or "refuse", not "${approvals}"`);
  }
  const ask = approvals === "ask" ? deps.ask : undefined;
  return async (question: string) =>
    ask !== undefined && /^\s*y(es)?\s*$/i.test(await ask(`${question} [y/N] `));
}

/** The agent's budget ledger, with the approval threshold stored beside its budget. */
async function runBudget(
  session: RunSession,
  yes: (question: string) => Promise<boolean>,
): Promise<BudgetLedger> {
  const { store, agent, deps } = session;
  return createBudgetLedger({
    store,
    clock: deps.clock,
    approval: await approvalFor(
      store,
      agent,
      approvalHook((r) =>
        yes(
          `Approve spending ${usdc(r.amount)} with ${r.provider} (${r.kind}${r.hold === undefined ? "" : `: the first period ${usdc(r.amount - r.hold)}, and ${usdc(r.hold)} held for its overage and next renewal`})?`,
        ),
      ),
    ),
  });
}

/**
 * The agent's prepaid channels (docs/channels.md, "Agents"): state and session keys in a journal of its
 * own, so a later run continues them, takes back their deposits and closes them.
 */
async function openRunChannels(
  session: RunSession,
  wallet: RunWallet,
  budget: BudgetLedger,
  runChannels: RunChannels,
): Promise<AgentChannels> {
  const { agent, deps, values } = session;
  const channelStore = await runChannels.openStore(
    join(session.dir, `channels-${encodeURIComponent(agent)}.journal`),
  );
  const channels = createAgentChannels({
    agent,
    budget,
    account: wallet.account,
    network: parseWire(NetworkSchema, wallet.network, { what: "network" }),
    facilitator: wallet.facilitator,
    store: channelStore,
    clock: deps.clock,
    fetch: deps.fetch,
    maxCloseDelay:
      values["max-close-delay"] === undefined
        ? undefined
        : parseWire(MaxCloseDelaySchema, values["max-close-delay"], { what: "--max-close-delay" }),
  });
  await runChannels.start(channels);
  return channels;
}

/** The run's subscriptions: the keeper, the chain it reads, and a look that logs instead of failing. */
type RunSubscriptions = {
  keeper: SubscriptionKeeper;
  chain: PublicClient | undefined;
  /** Subscriptions the policy cancelled during the run: their reason is printed once, by the check. */
  cancelledByPolicy: Set<bigint>;
  look(): Promise<void>;
};

/**
 * The agent's subscriptions, kept in its store (a second run reuses them) and read from the chain into
 * its ledger at the start and the end of the run (docs/budgets.md, "Subscriptions").
 */
async function openRunSubscriptions(
  session: RunSession,
  wallet: RunWallet,
  payer: Payer,
  budget: BudgetLedger,
): Promise<RunSubscriptions> {
  const { agent, logger, print, env, deps } = session;
  const devnetFile = readDevnetFile(session.dir);
  const rpcUrls =
    env.TOLLGATE_RPC_URL ?? (devnetFile?.network === wallet.network ? [devnetFile.rpcUrl] : undefined);
  const chain = rpcUrls === undefined ? undefined : createPublicClient({ transport: rpcTransport(rpcUrls) });
  const cancelledByPolicy = new Set<bigint>();
  const keeper = createSubscriptionKeeper({
    agent,
    payer,
    budget,
    logger,
    chain,
    // A plan that renews more often than the watcher looks is refused.
    minIntervalSeconds: Math.ceil((deps.watchIntervalMs ?? 60_000) / 1000),
    onAlert: (a) => {
      if (a.action === "cancelled" && cancelledByPolicy.has(a.subscriptionId)) return;
      print(`  subscription ${a.subscriptionId} ${a.action}: ${a.reason}`);
    },
  });
  const look = async () => {
    if (chain === undefined) return;
    try {
      await keeper.sync();
    } catch (error) {
      logger.warn({ err: error }, "could not read the agent's subscriptions from the chain");
    }
  };
  await look();
  return { keeper, chain, cancelledByPolicy, look };
}

/**
 * While the run lasts, the watcher keeps looking: it records renewals and deductions as they happen
 * and runs the policy's cancel check before each renewal comes due (it looks again when a cancel
 * window opens), so a subscription whose renewal falls inside a long run is cancelled in time when
 * the running forecast no longer justifies it (and one that starts inside a window, at once).
 */
function watchRunSubscriptions(
  session: RunSession,
  subscriptions: RunSubscriptions,
  payer: Payer,
  demand: DemandHistory,
): SubscriptionWatcher {
  const { agent, deps, store, print } = session;
  const { keeper, chain, cancelledByPolicy } = subscriptions;
  return watchSubscriptions({
    keeper: {
      sync: async () => (chain === undefined ? [] : keeper.sync()),
      cancel: (id, reason) => {
        cancelledByPolicy.add(id);
        return keeper.cancel(id, reason);
      },
    },
    policy: {
      agent,
      payer,
      demand,
      claims: createCancelClaims({ store, clock: deps.clock }),
      clock: deps.clock,
    },
    intervalMs: deps.watchIntervalMs ?? 60_000,
    logger: session.logger,
    onCancelCheck: (outcomes) => {
      for (const c of outcomes) {
        if (c.outcome === "cancelled") print(`  ${c.reason}`);
        if (c.outcome === "failed") print(`  could not cancel: ${c.reason} (${c.error})`);
      }
    },
  });
}

/** The parts of a run its tools are bought with. */
type RunPurchase = {
  payer: Payer;
  budget: BudgetLedger;
  channels: AgentChannels;
  subscriptions: RunSubscriptions;
  demand: DemandHistory;
  /** Expected calls per tool, from the task's forecast (empty until the task is planned). */
  forecast: { calls: Record<string, number> };
  onSpend(event: SpendEvent): void;
};

function discoverOptionsFor(session: RunSession, purchase: RunPurchase): DiscoverToolsOptions {
  const { agent, deps, values, env } = session;
  const { forecast } = purchase;
  return {
    market: values.market ?? env.TOLLGATE_MARKET_URL ?? DEFAULT_MARKET_URL,
    agent,
    payer: purchase.payer,
    budget: purchase.budget,
    fetch: deps.fetch,
    logger: session.logger,
    calls: createCallCounter({ clock: deps.clock }),
    subscriptions: purchase.subscriptions.keeper,
    channels: purchase.channels,
    demand: purchase.demand,
    // An x402 payment a seller fails is held pending and read back here (docs/budgets.md).
    chain: purchase.subscriptions.chain,
    forecast: (tool: string) =>
      forecast.calls[tool] === undefined
        ? undefined
        : { calls: forecast.calls[tool]!, horizonSeconds: 30 * 86_400 },
    onSpend: (event: SpendEvent) => purchase.onSpend(event),
  };
}

/** The orchestrator over the discovered tools, streaming the model's tokens unless `--json`. */
function runOrchestrator(
  session: RunSession,
  tools: StructuredToolInterface[],
  purchase: RunPurchase,
  approval: {
    approveAbove: Awaited<ReturnType<typeof getApprovalThreshold>>;
    yes: (q: string) => Promise<boolean>;
  },
  discoverOptions: DiscoverToolsOptions,
): Orchestrator {
  const { values, deps, agent, print } = session;
  const stream = values.json ? undefined : deps.stream;
  let streamed = false;
  return createOrchestrator({
    tools,
    logger: session.logger,
    model: modelFromEnv(deps.env, {
      streaming: stream !== undefined,
      timeoutMs:
        values["model-timeout-ms"] === undefined
          ? undefined
          : parseWire(ModelTimeoutSchema, values["model-timeout-ms"], { what: "--model-timeout-ms" }),
      logger: session.logger,
    }),
    budget: { ledger: purchase.budget, agent },
    approveAbove: approval.approveAbove,
    approve: (r) =>
      approval.yes(`Approve ${r.tool} from ${r.seller}: ${r.price} (up to ${usdc(r.maxAmount)})?`),
    // The market search tool: the model may find and buy what the market lists beyond these tools.
    findTools: async (search) =>
      (await discoverTools({ ...discoverOptions, search })).map((d) => ({
        tool: d.tool,
        seller: d.seller,
      })),
    onToken: (text) => {
      streamed = true;
      stream?.(text);
    },
    onEvent: (event) => {
      if (event.type === "model" && streamed) {
        streamed = false;
        stream?.("\n");
      }
      if (event.type === "approval") {
        print(`  ${event.request.tool}: spend ${event.approved ? "approved" : "not approved"}`);
      }
    },
  });
}

/** What the task or script produced. */
type RunResult = { answer: string; failures: RunFailure[]; planner: string };

/** Runs `script.ts`'s exported `main(context)`; whatever it returns is the answer. */
async function runScriptFile(session: RunSession, context: RunContext): Promise<RunResult> {
  const { target, deps, print } = session;
  const file = resolve(deps.cwd, target);
  if (!existsSync(file)) throw new TollgateError("InvalidRequest", `no such script: ${file}`);
  const script = (await import(pathToFileURL(file).href)) as Partial<RunScript>;
  if (typeof script.main !== "function") {
    throw new TollgateError("InvalidRequest", `${target} exports no main(context) function`);
  }
  print(`running ${target}`);
  const result = await script.main(context);
  return {
    answer: result === undefined ? "" : typeof result === "string" ? result : JSON.stringify(toJson(result)),
    failures: [],
    planner: `script ${basename(file)}`,
  };
}

/** Runs the task with the orchestrator, after setting the forecast its tools read. */
async function runTaskText(
  session: RunSession,
  orchestrator: Orchestrator,
  forecast: RunPurchase["forecast"],
): Promise<RunResult> {
  const { target, deps, values, print } = session;
  const planner = orchestrator.planner;
  const inputs = readInputs(values, deps.cwd);
  forecast.calls = orchestrator.forecast(target, inputs);
  print(
    `running "${target}" with ${planner === "rules" ? "the rule planner (offline)" : `model ${planner}`}`,
  );
  const run = await orchestrator.run(target, inputs, { signal: deps.signal });
  return {
    answer: run.answer,
    failures: [...planFailures(run.plan), ...unrecoveredFailures(run.steps)],
    planner,
  };
}

/**
 * After the task: unneeded subscriptions cancelled, the run's channels closed, and payments whose
 * outcome was unknown read back. Returns the channels closed.
 */
async function settleRun(
  session: RunSession,
  purchase: RunPurchase,
  runChannels: RunChannels,
): Promise<ChannelSettlement[]> {
  const { agent, store, deps, logger, print } = session;
  const { payer, budget } = purchase;
  // Subscriptions the learned demand no longer justifies are cancelled before they renew, and why is said.
  for (const c of await cancelUnneededAfterRun({
    agent,
    payer,
    store,
    demand: purchase.demand,
    clock: deps.clock,
    logger,
  })) {
    print(`  ${c.outcome === "cancelled" ? c.reason : `could not cancel: ${c.reason} (${c.error})`}`);
  }
  const closedChannels = await runChannels.close();
  for (const c of closedChannels) {
    print(
      `  channel ${c.channelId} closed: ${usdc(c.spent)} spent, ${usdc(c.returned)} back to the budget (in the wallet after the close delay)`,
    );
  }
  // Payments whose outcome was unknown (a lost /authorize answer, an x402 seller that failed the
  // call) are read back: committed if they settled, released once they can no longer settle; the
  // rest stay held for the next run (docs/budgets.md).
  const chain = purchase.subscriptions.chain;
  for (const p of await resolvePendingPayments({ agent, budget, payer, clock: deps.clock, chain })) {
    if (p.outcome === "pending") print(`  payment ${p.nonce}: outcome not known yet, ${usdc(p.amount)} held`);
    else print(`  payment ${p.nonce} held until its outcome was known: ${p.outcome} (${usdc(p.amount)})`);
  }
  return closedChannels;
}

/** Prints the run's outcome (`--json`, or the answer, spend report and failures); returns the exit code. */
function printOutcome(session: RunSession, outcome: RunOutcome): number {
  const { out } = session.deps;
  const { agent, answer, planner, done, failures, report, budget } = outcome;
  if (session.values.json) {
    out.log(JSON.stringify(toJson(outcome), null, 2));
    return done ? 0 : 1;
  }
  if (answer !== "") out.log(`\nAnswer (${planner}):\n${answer}`);
  out.log("\nSpend report");
  for (const line of formatSpendReport(report).split("\n")) out.log(`  ${line}`);
  const left = budget.remaining.total;
  out.log(
    `  budget of ${agent}: spent ${usdc(budget.spent.total)}${left === undefined ? "" : `, ${usdc(left)} left`}`,
  );
  if (done) return 0;
  out.error("\ntask not done:");
  for (const failure of failures) {
    const code = failure.error.split(":")[0] ?? "";
    const why = BUDGET_REFUSALS.has(code) ? `refused by the budget: ${failure.error}` : failure.error;
    out.error(`  ${failure.tool}${failure.document === undefined ? "" : ` (${failure.document})`}: ${why}`);
  }
  return 1;
}

/** Runs `tollgate run …`; returns the exit code. */
export async function runCommand(argv: string[], deps: RunCommandDeps): Promise<number> {
  const { values, positionals } = parseRunArgs(argv);
  if (values.help === true) {
    deps.out.log(usage);
    return 0;
  }
  const target = positionals.join(" ").trim();
  if (target === "") {
    deps.out.error(usage);
    return 2;
  }
  const env = parseWire(RunEnvSchema, deps.env, { what: "environment" });
  const logger =
    deps.logger ??
    createCliLogger({
      name: "agent",
      level: env.LOG_LEVEL,
      format: logFormatFor(deps.env, deps.terminal ?? { stdout: false, stderr: false }),
    });
  const dir = resolve(deps.cwd, values.dir ?? env.TOLLGATE_DIR);
  const agent = values.agent;
  const print = values.json ? () => undefined : (line: string) => deps.out.log(line);
  const { account, accountSource } = runAccount(values, env, dir);

  const facilitator = createFacilitatorClient({
    url: values.facilitator ?? env.TOLLGATE_FACILITATOR_URL ?? DEFAULT_FACILITATOR_URL,
    fetch: deps.fetch,
  });
  const network = values.network ?? (await facilitator.supported()).networks[0]?.network;
  if (network === undefined) {
    throw new TollgateError("UnsupportedNetwork", "the facilitator supports no network; pass --network");
  }
  const wallet: RunWallet = { account, accountSource, facilitator, network };

  // Held for the whole run: the ledger is written as tools are bought.
  const store = await openAgentStore({ databaseUrl: env.DATABASE_URL, dir });
  const session: RunSession = { deps, values, env, target, agent, dir, logger, print, store };
  const runChannels = createRunChannels({
    keep: values["keep-channels"] === true,
    logger,
    print,
    idleEveryMs: deps.watchIntervalMs ?? 60_000,
  });
  const live: { watcher: SubscriptionWatcher | undefined } = { watcher: undefined };
  try {
    return await runAgent(session, wallet, runChannels, live);
  } finally {
    await live.watcher?.stop();
    // A run that failed still closes what it opened (best effort: the next run retries).
    await runChannels
      .close()
      .catch((error: unknown) => logger.warn({ err: error }, "could not close the run's channels"));
    await runChannels.closeStore();
    await store.close();
  }
}

/** The run itself, once its store is open: buys tools, runs the task or script, settles and reports. */
async function runAgent(
  session: RunSession,
  wallet: RunWallet,
  runChannels: RunChannels,
  live: { watcher: SubscriptionWatcher | undefined },
): Promise<number> {
  const { deps, agent, store, logger, print } = session;
  const yes = approvalQuestion(session);
  const approveAbove = await getApprovalThreshold(store, agent);
  const budget = await runBudget(session, yes);
  if ((await budget.getLimits(agent)) === undefined) {
    deps.out.error(
      `tollgate run: agent "${agent}" has no budget (set one with \`tollgate budget set ${agent} --total 5 …\`)`,
    );
    return 1;
  }
  const { account, network, facilitator } = wallet;
  const payer = createPayer({ account, network, facilitator, fetch: deps.fetch, clock: deps.clock });
  const channels = await openRunChannels(session, wallet, budget, runChannels);
  const subscriptions = await openRunSubscriptions(session, wallet, payer, budget);
  const spend = createSpendCollector();
  // Kept for the dashboard's agent views (docs/dashboard.md): spend by tool, the latest run's report.
  const recording = startRunRecording(store, {
    agent,
    clock: deps.clock,
    onError: (error) => logger.warn({ err: error }, "could not record a spend event for the dashboard"),
  });
  // The policy's learned demand (docs/policy.md "Learning"), kept in the agent's store across runs.
  const demand = createDemandHistory({ store, clock: deps.clock });
  const purchase: RunPurchase = {
    payer,
    budget,
    channels,
    subscriptions,
    demand,
    forecast: { calls: {} },
    onSpend: (event) => {
      spend.record(event);
      recording.record(event);
      print(`  ${describeSpend(event)}`);
    },
  };
  const watcher = watchRunSubscriptions(session, subscriptions, payer, demand);
  live.watcher = watcher;
  const discoverOptions = discoverOptionsFor(session, purchase);
  const discovered = await discoverTools(discoverOptions);
  const tools = discovered.map((d) => d.tool);
  print(
    `agent ${agent} (${account.address}${wallet.accountSource === undefined ? "" : `, ${wallet.accountSource}`}) on ${network}: ${tools.length} paid tool(s) found`,
  );
  for (const d of discovered) print(`  ${d.tool.name} from ${d.seller}`);
  const orchestrator = runOrchestrator(session, tools, purchase, { approveAbove, yes }, discoverOptions);
  const context: RunContext = {
    agent,
    tools,
    discovered,
    orchestrator,
    budget,
    payer,
    channels,
    print,
    signal: deps.signal,
  };
  const { answer, failures, planner } = ScriptPattern.test(session.target)
    ? await runScriptFile(session, context)
    : await runTaskText(session, orchestrator, purchase.forecast);
  const done = failures.length === 0;
  await watcher.stop();
  live.watcher = undefined;
  const closedChannels = await settleRun(session, purchase, runChannels);
  await recording.finish();
  const report = spend.report();
  await subscriptions.look();
  const budgetReport = await budget.report(agent);
  return printOutcome(session, {
    agent,
    planner,
    answer,
    done,
    failures,
    report,
    budget: budgetReport,
    ...(closedChannels.length > 0 ? { channels: closedChannels } : {}),
  });
}

export async function run(argv: string[]): Promise<number> {
  const controller = new AbortController();
  const interrupt = () => controller.abort();
  process.once("SIGINT", interrupt);
  const prompt = createLinePrompt(process.stdin, process.stderr);
  try {
    return await runCommand(argv, {
      env: process.env,
      out: console,
      fetch: globalThis.fetch,
      clock: systemClock,
      cwd: process.cwd(),
      signal: controller.signal,
      ask: (question) => prompt.ask(question),
      interactive: process.stdin.isTTY === true,
      terminal: { stdout: process.stdout.isTTY === true, stderr: process.stderr.isTTY === true },
      stream: (text) => process.stdout.write(text),
    });
  } finally {
    prompt.close();
    process.off("SIGINT", interrupt);
  }
}
