/**
 * `tollgate facilitator status`: what a running facilitator's `/healthz` says, for a person. With the
 * metrics token (`TOLLGATE_METRICS_TOKEN`, or none from the facilitator's own host) it includes the
 * figures a stranger does not get: the gas key's balance and runway, the base fee against the maximum
 * fee and the transactions waiting for it (src/facilitator/gasHealth.ts).
 */
import type { FetchFn } from "../http/facilitatorClient.ts";
import { type Health, HealthSchema } from "../protocol/facilitator.ts";

export type FacilitatorStatus = { ok: boolean; text: string };

/**
 * Reads `url`'s `/healthz` and renders it; `ok` is false when it is degraded or cannot be read.
 * @example
 * const { ok, text } = await facilitatorStatus({ url: "http://127.0.0.1:4020", fetch });
 */
export async function facilitatorStatus(options: {
  url: string;
  token?: string | undefined;
  fetch: FetchFn;
}): Promise<FacilitatorStatus> {
  const base = options.url.replace(/\/+$/, "");
  let health: Health;
  try {
    const response = await options.fetch(`${base}/healthz`, {
      headers: options.token === undefined ? {} : { authorization: `Bearer ${options.token}` },
      signal: AbortSignal.timeout(15_000),
    });
    health = HealthSchema.parse(await response.json());
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    return { ok: false, text: `facilitator ${base}: unreachable (${reason})` };
  }
  return { ok: health.status === "ok", text: formatHealth(base, health) };
}

/** One line per check, the gas key's figures where the facilitator gave them. */
export function formatHealth(base: string, health: Health): string {
  const lines = [`facilitator ${base}: ${health.status}`];
  const checks = health.checks ?? {};
  let figures = false;
  for (const [name, check] of Object.entries(checks)) {
    const state = check.ok ? "ok" : `NOT OK${check.since === undefined ? "" : ` since ${check.since}`}`;
    const parts = [state];
    if (check.message !== undefined) parts.push(check.message);
    const details = check.details;
    if (details !== undefined) {
      figures = true;
      if (name === "gas") parts.push(gasFigures(details));
      else if (name === "fees") parts.push(feeFigures(details));
    }
    lines.push(`  ${name.padEnd(6)} ${parts.join(": ")}`);
  }
  if (!figures && ("gas" in checks || "fees" in checks)) {
    lines.push(
      "  (the gas key's figures are shown to a metrics reader: set TOLLGATE_METRICS_TOKEN, or ask from the facilitator's host)",
    );
  }
  return lines.join("\n");
}

type Details = NonNullable<NonNullable<Health["checks"]>[string]["details"]>;

function gasFigures(d: Details): string {
  const balance = `balance ${d.balanceEth ?? "?"} ETH`;
  const span = typeof d.spanSeconds === "number" ? duration(d.spanSeconds) : "?";
  if (d.runwaySeconds === null || d.runwaySeconds === undefined) {
    return `${balance}, nothing spent in the last day (runway unbounded)`;
  }
  return `${balance}, runway ${duration(Number(d.runwaySeconds))} at the pace of the last ${span} (${d.spentWei ?? "?"} wei spent)`;
}

function feeFigures(d: Details): string {
  const parts: string[] = [];
  if (d.rows !== undefined) parts.push(`${d.rows} transaction(s) waiting`);
  if (d.baseFeeGwei !== undefined && d.baseFeeGwei !== null) parts.push(`base fee ${d.baseFeeGwei} gwei`);
  if (d.maxFeeGwei !== undefined) parts.push(`maximum ${d.maxFeeGwei} gwei`);
  return parts.join(", ");
}

/** `3 d 4 h`, `5 h 12 min`, `40 min`, `12 s`. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86_400);
  const h = Math.floor((s % 86_400) / 3_600);
  const m = Math.floor((s % 3_600) / 60);
  if (d > 0) return `${d} d ${h} h`;
  if (h > 0) return `${h} h ${m} min`;
  if (m > 0) return `${m} min`;
  return `${s} s`;
}
