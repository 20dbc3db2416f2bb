/**
 * Numbers and tables for the benchmarks: latency percentiles, rates and side-by-side ratios.
 * Latencies are kept in milliseconds as plain numbers (measurements, not money).
 */

/** Nearest-rank percentile (`p` in 0..100) of samples; `NaN` for no samples. Sorts a copy. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** Milliseconds elapsed since `start` (a `process.hrtime.bigint()` reading). */
export function elapsedMs(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e6;
}

/** A number for a table cell: a few significant digits, `-` for `NaN`. */
export function fmt(value: number, digits = 3): string {
  if (!Number.isFinite(value)) return "-";
  if (value === 0) return "0";
  const magnitude = Math.abs(value);
  if (magnitude >= 10 ** digits) return Math.round(value).toString();
  return Number(value.toPrecision(digits)).toString();
}

/** `a / b` as `1.23x`, `-` when either side is missing or `b` is zero. */
export function ratio(a: number, b: number): string {
  if (!Number.isFinite(a) || !Number.isFinite(b) || b === 0) return "-";
  return `${fmt(a / b)}x`;
}

/** A fixed-width text table: the first column left-aligned, the others right-aligned. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}
