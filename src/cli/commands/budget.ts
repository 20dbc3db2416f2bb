/**
 * `tollgate budget set | show`: an agent's spending limits and where it stands against them, in the
 * agent runtime's store (DATABASE_URL, or PGlite in `<dir>/agents`).
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { getApprovalThreshold, setApprovalThreshold } from "../../agent/budget/approvalThreshold.ts";
import { availableFor } from "../../agent/budget/budgetHeadroom.ts";
import type { BudgetLimits } from "../../agent/budget/budgetLimits.ts";
import { SpendKinds } from "../../agent/budget/budgetLimits.ts";
import type { BudgetReport } from "../../agent/budget/budgetReport.ts";
import { createBudgetLedger } from "../../agent/budget/createBudgetLedger.ts";
import { AddressSchema } from "../../protocol/address.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { inlineNegativeValues, MONEY_NOTATION, parseMoney } from "../money.ts";
import { openAgentStore } from "../openAgentStore.ts";

export const summary = "set <agent> --total 10 --daily 2 … | show <agent> — an agent's spending limits";

const BudgetEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  DATABASE_URL: z.string().optional(),
});

export type CommandOutput = { log(line: string): void; error(line: string): void };

export type BudgetCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  clock: Clock;
};

const usage = `usage: tollgate budget set <agent> [--total 10] [--daily 2] [--per-call 0.05]
                           [--provider <address>=1 …] [--max-subscription 20] [--approve-above 0.5]
                           [--replace]
         set limits; limits not named are kept ("none" removes one, --replace starts afresh);
         total, daily and per-call limits are above zero (0 would forbid every spend);
         spends above --approve-above need a yes (tollgate run asks on the terminal, or refuses)
       tollgate budget show <agent> [--json]
         spent, reserved and remaining per limit, per provider and per kind
${MONEY_NOTATION}
options: --dir .tollgate (PGlite in <dir>/agents unless DATABASE_URL is set)
environment: DATABASE_URL TOLLGATE_DIR`;

/** The money flags of `budget set`, for `--total -1` to reach `parseMoney`. */
const MONEY_FLAGS = ["--total", "--daily", "--per-call", "--max-subscription", "--approve-above"];

/**
 * A limit (`"2.5"` → 2 500 000n, `"none"` → null: remove the limit). Zero is refused where it would forbid
 * every spend (total, daily, per call); a zero per-provider or subscription limit, or approval threshold,
 * narrows what the agent may do and is kept.
 */
function parseLimit(flag: string, text: string, allowZero: boolean): bigint | null {
  if (text === "none") return null;
  return parseMoney(text, flag, { allowZero });
}

type LimitKey = "total" | "daily" | "perCall" | "maxSubscriptionCommitment";

/** What `budget set` was asked to change: each limit named, `null` where it is removed. */
type BudgetChanges = {
  limits: [key: LimitKey, limit: bigint | null][];
  providers: [address: `0x${string}`, limit: bigint | null][];
  approveAbove: bigint | null | undefined;
};

/** Reads every limit flag before anything is opened, so a refused amount changes nothing. */
function parseBudgetFlags(values: Record<string, string | string[] | boolean | undefined>): BudgetChanges {
  const scalar = [
    ["total", "total", false],
    ["daily", "daily", false],
    ["per-call", "perCall", false],
    ["max-subscription", "maxSubscriptionCommitment", true],
  ] as const;
  const limits: BudgetChanges["limits"] = [];
  for (const [flag, key, allowZero] of scalar) {
    const text = values[flag];
    if (typeof text === "string") limits.push([key, parseLimit(`--${flag}`, text, allowZero)]);
  }
  const providers: BudgetChanges["providers"] = [];
  for (const entry of (values.provider as string[] | undefined) ?? []) {
    const at = entry.lastIndexOf("=");
    if (at < 0)
      throw new TollgateError("InvalidRequest", `--provider: expected <address>=<amount>, got "${entry}"`);
    const address = parseWire(AddressSchema, entry.slice(0, at), { what: "--provider address" });
    providers.push([address, parseLimit(`--provider ${address}`, entry.slice(at + 1), true)]);
  }
  const approveAbove = values["approve-above"];
  return {
    limits,
    providers,
    approveAbove:
      typeof approveAbove === "string" ? parseLimit("--approve-above", approveAbove, true) : undefined,
  };
}

function applyChanges(current: BudgetLimits, changes: BudgetChanges): BudgetLimits {
  const next: BudgetLimits = { ...current, perProvider: { ...current.perProvider } };
  for (const [key, limit] of changes.limits) {
    if (limit === null) delete next[key];
    else next[key] = limit;
  }
  const providers = next.perProvider!;
  for (const [address, limit] of changes.providers) {
    for (const known of Object.keys(providers)) {
      if (known.toLowerCase() === address.toLowerCase()) delete providers[known as keyof typeof providers];
    }
    if (limit !== null) providers[address] = limit;
  }
  if (Object.keys(providers).length === 0) delete next.perProvider;
  return next;
}

const usdc = (amount: bigint | undefined, none = "unlimited") =>
  amount === undefined ? none : formatUnitsExact(amount);

function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  return rows.map((row) =>
    row
      .map((cell, column) => (column === 0 ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!)))
      .join("  ")
      .trimEnd(),
  );
}

/** The human view of a report, amounts in USDC. */
export function formatBudgetReport(report: BudgetReport): string[] {
  const { limits } = report;
  const lines = [`agent ${report.agent} at ${report.at.toISOString()} (amounts in USDC)`, ""];
  lines.push(
    ...table([
      ["limit", "limit", "spent", "reserved", "remaining"],
      [
        "total",
        usdc(limits.total),
        usdc(report.spent.total),
        usdc(report.reserved.total),
        usdc(report.remaining.total, "-"),
      ],
      [
        "daily (last 24 h)",
        usdc(limits.daily),
        usdc(report.spent.daily),
        usdc(report.reserved.daily),
        usdc(report.remaining.daily, "-"),
      ],
      ["per call", usdc(limits.perCall), "", "", usdc(report.remaining.perCall, "-")],
      [
        "subscription commitment",
        usdc(limits.maxSubscriptionCommitment),
        usdc(report.subscriptions.committed),
        usdc(report.subscriptions.reserved),
        usdc(report.remaining.maxSubscriptionCommitment, "-"),
      ],
    ]),
  );
  if (report.perProvider.length > 0) {
    lines.push("");
    lines.push(
      ...table([
        ["provider", "limit", "spent", "reserved", "remaining", "available now"],
        ...report.perProvider.map((p) => [
          p.provider,
          usdc(p.limit),
          usdc(p.spent),
          usdc(p.reserved),
          usdc(p.remaining, "-"),
          usdc(availableFor(report, { provider: p.provider, kind: "one-time" })),
        ]),
      ]),
    );
  }
  lines.push("");
  lines.push(
    ...table([
      ["kind", "spent", "reserved"],
      ...SpendKinds.map((kind) => [
        kind,
        usdc(report.perKind[kind].spent),
        usdc(report.perKind[kind].reserved),
      ]),
    ]),
  );
  if (report.subscriptions.active.length > 0) {
    lines.push("", "active subscriptions:");
    for (const s of report.subscriptions.active) {
      lines.push(`  ${s.ref}  ${s.provider}  ${usdc(s.amount)} per period`);
    }
  }
  return lines;
}

/** `report` as JSON-safe data: amounts as decimal strings of the smallest unit, as on the wire. */
function toJson(report: BudgetReport): unknown {
  return JSON.parse(
    JSON.stringify(report, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value)),
  );
}

/** Runs `tollgate budget …`; returns the exit code. */
export async function budgetCommand(argv: string[], deps: BudgetCommandDeps): Promise<number> {
  const { values, positionals } = parseArgs({
    args: inlineNegativeValues(argv, MONEY_FLAGS),
    allowPositionals: true,
    options: {
      total: { type: "string" },
      daily: { type: "string" },
      "per-call": { type: "string" },
      provider: { type: "string", multiple: true },
      "max-subscription": { type: "string" },
      "approve-above": { type: "string" },
      replace: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      dir: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true) {
    deps.out.log(usage);
    return 0;
  }
  const [command, agent, ...extra] = positionals;
  if ((command !== "set" && command !== "show") || agent === undefined || extra.length > 0) {
    deps.out.error(usage);
    return 2;
  }
  const changes = command === "set" ? parseBudgetFlags(values) : undefined;
  const env = parseWire(BudgetEnvSchema, deps.env, { what: "environment" });
  const store = await openAgentStore({
    databaseUrl: env.DATABASE_URL,
    dir: resolve(values.dir ?? env.TOLLGATE_DIR),
  });
  try {
    const ledger = createBudgetLedger({ store, clock: deps.clock });
    if (changes !== undefined) {
      const current = values.replace ? {} : ((await ledger.getLimits(agent)) ?? {});
      const limits = await ledger.setLimits(agent, applyChanges(current, changes));
      // Stored with the budget (migration 0077); kept unless named, cleared by --replace.
      if (changes.approveAbove !== undefined) {
        await setApprovalThreshold(store, agent, changes.approveAbove);
      } else if (values.replace) {
        await setApprovalThreshold(store, agent, null);
      }
      const threshold = await getApprovalThreshold(store, agent);
      deps.out.log(`budget for ${agent} set (amounts in USDC):`);
      deps.out.log(
        `  total ${usdc(limits.total)}, daily ${usdc(limits.daily)}, per call ${usdc(limits.perCall)}`,
      );
      deps.out.log(`  subscription commitment ${usdc(limits.maxSubscriptionCommitment)}`);
      deps.out.log(`  approval needed above ${usdc(threshold, "never")}`);
      for (const [provider, limit] of Object.entries(limits.perProvider ?? {})) {
        deps.out.log(`  provider ${provider} ${usdc(limit)}`);
      }
      return 0;
    }
    if ((await ledger.getLimits(agent)) === undefined) {
      deps.out.error(
        `tollgate budget: agent "${agent}" has no budget (set one with \`tollgate budget set ${agent} …\`)`,
      );
      return 1;
    }
    const report = await ledger.report(agent);
    const approveAbove = await getApprovalThreshold(store, agent);
    if (values.json) {
      const json = toJson(report) as Record<string, unknown>;
      deps.out.log(JSON.stringify({ ...json, approveAbove: approveAbove?.toString() ?? null }, null, 2));
    } else {
      for (const line of formatBudgetReport(report)) deps.out.log(line);
      deps.out.log("");
      deps.out.log(`approval needed above: ${usdc(approveAbove, "never")}`);
    }
    return 0;
  } finally {
    await store.close();
  }
}

export function run(argv: string[]): Promise<number> {
  return budgetCommand(argv, { env: process.env, out: console, clock: systemClock });
}
