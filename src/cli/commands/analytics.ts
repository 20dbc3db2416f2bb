/**
 * `tollgate analytics`: a provider's revenue from the facilitator's analytics endpoints, as a table of
 * hours or days with totals by scheme and plan. Authenticates with the provider's API key.
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import {
  AnalyticsBucketSchema,
  AnalyticsSummaryResponseSchema,
  type AnalyticsTotals,
  AnalyticsVolumeResponseSchema,
} from "../../facilitator/analytics/analyticsApi.ts";
import { createFacilitatorClient, type FetchFn } from "../../http/facilitatorClient.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { loadProviderKey } from "../providerKeys.ts";

export const summary = "a provider's volume, payments and payers by hour or day, scheme and plan";

export const DEFAULT_FACILITATOR_URL = "http://127.0.0.1:4020";

/** What the provider commands read from the environment. */
export const ProviderCliEnvSchema = z.object({
  TOLLGATE_FACILITATOR_URL: z.url({ protocol: /^https?$/ }).optional(),
  TOLLGATE_API_KEY: z.string().min(1).optional(),
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
});

type CommandOutput = { log(line: string): void; error(line: string): void };

export type AnalyticsCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  fetch: FetchFn;
};

const usage = `usage: tollgate analytics [--bucket day|hour] [--from <time>] [--to <time>] [--token 0x…]
                          [--facilitator ${DEFAULT_FACILITATOR_URL}] [--api-key tg_…] [--dir .tollgate] [--json]
  Times are ISO 8601 (2026-11-22, 2026-11-22T10:00:00Z) or Unix seconds. Defaults: the last 30 days
  by day, the last 24 hours by hour. Amounts are shown in USDC (6 decimals).
  The facilitator defaults to TOLLGATE_FACILITATOR_URL; the API key to TOLLGATE_API_KEY, then to the
  key \`tollgate provider register --save\` saved in <dir> for that facilitator.`;

/** Runs `tollgate analytics …`; returns the exit code. */
export async function analyticsCommand(argv: string[], deps: AnalyticsCommandDeps): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      bucket: { type: "string", default: "day" },
      from: { type: "string" },
      to: { type: "string" },
      token: { type: "string" },
      facilitator: { type: "string" },
      "api-key": { type: "string" },
      dir: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true) {
    deps.out.log(usage);
    return 0;
  }
  if (positionals.length > 0) {
    deps.out.error(usage);
    return 2;
  }
  const bucket = parseWire(AnalyticsBucketSchema, values.bucket, { what: "--bucket" });
  const client = providerClient(values, deps);

  const query = new URLSearchParams({ bucket });
  if (values.from !== undefined) query.set("from", values.from);
  if (values.to !== undefined) query.set("to", values.to);
  if (values.token !== undefined) query.set("token", values.token);
  const volume = await client.request("GET", `/analytics/volume?${query}`, AnalyticsVolumeResponseSchema);
  // The summary covers exactly the table's range, so its totals are the sums of the rows.
  const range = new URLSearchParams({ from: volume.from, to: volume.to });
  if (values.token !== undefined) range.set("token", values.token);
  const totals = await client.request("GET", `/analytics/summary?${range}`, AnalyticsSummaryResponseSchema);

  if (values.json) {
    deps.out.log(JSON.stringify({ volume, summary: totals }, null, 2));
    return 0;
  }
  const label = (iso: string) =>
    bucket === "day" ? iso.slice(0, 10) : `${iso.slice(0, 10)} ${iso.slice(11, 16)}`;
  deps.out.log(`${volume.provider}: revenue by ${bucket} (UTC), ${volume.from} to ${volume.to}, in USDC`);
  deps.out.log("");
  const header = ["start", "volume", "payments", "payers", "one-time", "subscription", "metered"];
  const rows = volume.buckets.map((b) => [
    label(b.start),
    usdc(b.volume),
    String(b.count),
    String(b.uniquePayers),
    usdc(b.schemes["one-time"].volume),
    usdc(b.schemes.subscription.volume),
    usdc(b.schemes.metered.volume),
  ]);
  const total = [
    "total",
    usdc(totals.volume),
    String(totals.count),
    String(totals.uniquePayers),
    usdc(totals.schemes["one-time"].volume),
    usdc(totals.schemes.subscription.volume),
    usdc(totals.schemes.metered.volume),
  ];
  for (const line of table([header, ...rows, total])) deps.out.log(line);

  deps.out.log("");
  const schemeRows = (["one-time", "subscription", "metered"] as const).map((scheme) =>
    totalsRow(scheme, totals.schemes[scheme]),
  );
  for (const line of table([["scheme", "volume", "payments", "payers"], ...schemeRows])) deps.out.log(line);
  if (totals.plans.length > 0) {
    deps.out.log("");
    const planRows = totals.plans.map((p) => totalsRow(`plan ${p.planId}`, p));
    for (const line of table([["plan", "volume", "payments", "payers"], ...planRows])) deps.out.log(line);
  }
  return 0;
}

/**
 * A facilitator client authenticated as the provider. The key is `--api-key`, else TOLLGATE_API_KEY,
 * else the one `tollgate provider register --save` saved for this very facilitator (a saved key is
 * never sent to another one).
 */
export function providerClient(
  values: { facilitator?: string | undefined; "api-key"?: string | undefined; dir?: string | undefined },
  deps: { env: Record<string, string | undefined>; fetch: FetchFn; cwd?: string | undefined },
) {
  const env = parseWire(ProviderCliEnvSchema, deps.env, { what: "environment" });
  const url = values.facilitator ?? env.TOLLGATE_FACILITATOR_URL ?? DEFAULT_FACILITATOR_URL;
  const dir = resolve(deps.cwd ?? process.cwd(), values.dir ?? env.TOLLGATE_DIR);
  const apiKey = values["api-key"] ?? env.TOLLGATE_API_KEY ?? loadProviderKey(dir, url)?.apiKey;
  if (apiKey === undefined) {
    throw new TollgateError(
      "Unauthorized",
      `a provider API key for ${url} is needed: run \`tollgate provider register --save\` ` +
        "(with --account <n> on a devnet, TOLLGATE_PROVIDER_KEY elsewhere), or pass --api-key or set TOLLGATE_API_KEY",
    );
  }
  return createFacilitatorClient({ url, fetch: deps.fetch, headers: { authorization: `Bearer ${apiKey}` } });
}

function usdc(atomic: string): string {
  return formatUnitsExact(BigInt(atomic));
}

function totalsRow(name: string, totals: AnalyticsTotals): string[] {
  return [name, usdc(totals.volume), String(totals.count), String(totals.uniquePayers)];
}

/** Left-aligns the first column, right-aligns the others. */
function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]?.length ?? 0)));
  return rows.map((row) =>
    row
      .map((cell, column) => (column === 0 ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!)))
      .join("  ")
      .trimEnd(),
  );
}

export async function run(argv: string[]): Promise<number> {
  return analyticsCommand(argv, { env: process.env, out: console, fetch });
}
