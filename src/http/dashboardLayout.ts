/**
 * The dashboard's page frame and small view helpers. Every page is a full HTML document: the only
 * script is /dashboard/assets/dashboard.js (plus uPlot), the only styles are our stylesheets.
 */
import { getAddress, isAddress } from "viem";
import { formatUnitsExact } from "../protocol/amount.ts";
import { html, type SafeHtml } from "./html.ts";

/** The token amounts are shown in (the facilitator's first token). */
export type DisplayToken = { decimals: number; symbol: string };

/** A navigation entry of the page's top bar. */
export type NavEntry = { href: string; label: string };

/** Where a signed-in page's navigation points, and who is signed in. */
export type PageFrame = {
  title: string;
  /** The navigation entry to mark as current. */
  current?: string | undefined;
  nav: readonly NavEntry[];
  /** "Provider 0x…" or "Agent operator"; absent on the sign-in page. */
  who?: string | undefined;
  /** The session's CSRF token, for the sign-out form. */
  csrfToken?: string | undefined;
  notice?: { text: string; error?: boolean | undefined } | undefined;
};

// The tab's icon inline (a gate's bar on the top bar's colour): no request, nothing more to serve.
const FAVICON = `data:image/svg+xml,${encodeURIComponent(
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" fill="#0d1117"/><path d="M7 8h18v5h-6.5v12h-5V13H7z" fill="#58a6ff"/></svg>',
)}`;

/** A complete page. */
export function page(frame: PageFrame, body: SafeHtml): string {
  const nav = frame.nav.map(
    (item) =>
      html`<a href="${item.href}" class="${item.href === frame.current ? "current" : ""}">${item.label}</a>`,
  );
  const signOut =
    frame.csrfToken === undefined
      ? ""
      : html`<form method="post" action="/dashboard/logout">${csrfField(frame.csrfToken)}<button type="submit">Sign out</button></form>`;
  const notice =
    frame.notice === undefined
      ? ""
      : html`<div class="notice${frame.notice.error === true ? " error" : ""}" role="status">${frame.notice.text}</div>`;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>${frame.title} · Tollgate</title>
<link rel="icon" type="image/svg+xml" href="${FAVICON}">
<link rel="stylesheet" href="/dashboard/assets/uPlot.min.css">
<link rel="stylesheet" href="/dashboard/assets/dashboard.css">
<script src="/dashboard/assets/uPlot.min.js" defer></script>
<script src="/dashboard/assets/dashboard.js" defer></script>
</head>
<body>
<header class="top"><span class="brand">Tollgate</span><nav>${nav}</nav><div class="who">${frame.who ?? ""}${signOut}</div></header>
<main>
<h1>${frame.title}</h1>
${notice}
${body}
</main>
</body>
</html>`.value;
}

/** The hidden field every state-changing form carries. */
export function csrfField(token: string): SafeHtml {
  return html`<input type="hidden" name="_csrf" value="${token}">`;
}

/** An amount in the token's smallest unit as token text with its symbol (`12.5 USDC`). */
export function money(amount: bigint, token: DisplayToken): string {
  return `${formatUnitsExact(amount, token.decimals)} ${token.symbol}`;
}

/** A time as `2026-11-22 10:15 UTC`. */
export function when(date: Date | number | null | undefined): string {
  if (date === null || date === undefined) return "-";
  const d = typeof date === "number" ? new Date(date * 1000) : date;
  if (Number.isNaN(d.getTime())) return "-";
  return `${d.toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

/** A long hex value shortened for tables (`0x1234…abcd`); the full value in the title. */
export function short(hex: string): SafeHtml {
  const text = hex.length > 14 ? `${hex.slice(0, 6)}…${hex.slice(-4)}` : hex;
  return html`<span class="mono" title="${hex}">${text}</span>`;
}

/** An address shortened in its checksum form (`short`); any other text (a tool's name) as it is. */
export function shortAddress(text: string): SafeHtml | string {
  return isAddress(text) ? short(getAddress(text)) : text;
}

/**
 * A table from headers and rows; an empty table says so. An empty header is a column of buttons,
 * named "Actions" for screen readers only.
 */
export function table(
  headers: readonly (string | { label: string; num: true })[],
  rows: readonly SafeHtml[],
  empty: string,
): SafeHtml {
  const head = headers.map((h) =>
    h === ""
      ? html`<th><span class="visually-hidden">Actions</span></th>`
      : typeof h === "string"
        ? html`<th>${h}</th>`
        : html`<th class="num">${h.label}</th>`,
  );
  if (rows.length === 0) return html`<p class="muted">${empty}</p>`;
  // Wide tables scroll in their own box (focusable, so a keyboard can scroll it), not the page.
  return html`<div class="table-scroll" tabindex="0"><table><thead><tr>${head}</tr></thead><tbody>${rows}</tbody></table></div>`;
}

const DAY_MS = 86_400_000;

/**
 * A custom range as a plain GET form (no script): from and to as UTC dates, and the bucket. The
 * analytics query reads a date as its 00:00 UTC, so `to` is shown as the first midnight at or after
 * the range's end, and the hint says that day is not included.
 */
export function rangeForm(action: string, range: { bucket: "hour" | "day"; from: Date; to: Date }): SafeHtml {
  const day = (d: Date) => d.toISOString().slice(0, 10);
  const toDay = new Date(Math.ceil(range.to.getTime() / DAY_MS) * DAY_MS);
  const option = (b: "hour" | "day", label: string) =>
    html`<option value="${b}"${b === range.bucket ? html` selected` : ""}>${label}</option>`;
  return html`<form method="get" action="${action}" class="range-form" aria-label="Custom range">
<label>From <input type="date" name="from" value="${day(range.from)}" required></label>
<label>To <input type="date" name="to" value="${day(toDay)}" required></label>
<label>By <select name="bucket">${option("hour", "hour")}${option("day", "day")}</select></label>
<button type="submit">Show</button>
<span class="muted">UTC days; the To day is not included.</span>
</form>`;
}

/** A duration in seconds as `30d`, `12h`, `90s`. */
export function duration(seconds: number): string {
  if (seconds % 86_400 === 0) return `${seconds / 86_400}d`;
  if (seconds % 3_600 === 0) return `${seconds / 3_600}h`;
  if (seconds % 60 === 0) return `${seconds / 60}m`;
  return `${seconds}s`;
}
