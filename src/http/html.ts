/**
 * HTML built from template strings where every interpolated value is escaped unless it is already
 * `SafeHtml` (built by `html` itself). There is no other way to put text into a dashboard page, so a
 * value read from the store, a URL or a provider's description can never become markup.
 */

/** Markup that is already safe to emit. */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
  "`": "&#96;",
};

/** Text as HTML: safe in element content and in quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (ch) => ESCAPES[ch] ?? ch);
}

type Part = SafeHtml | string | number | bigint | boolean | null | undefined | readonly Part[];

function render(part: Part): string {
  if (part === null || part === undefined || part === false) return "";
  if (part instanceof SafeHtml) return part.value;
  if (Array.isArray(part)) return part.map((p) => render(p as Part)).join("");
  return escapeHtml(String(part));
}

/**
 * Tagged template: `html\`<td>${name}</td>\`` escapes `name`; arrays are joined; `null`,
 * `undefined` and `false` render as nothing.
 */
export function html(strings: TemplateStringsArray, ...values: readonly Part[]): SafeHtml {
  let out = strings[0] ?? "";
  for (let i = 0; i < values.length; i++) out += render(values[i]) + (strings[i + 1] ?? "");
  return new SafeHtml(out);
}

/**
 * JSON for a `<script type="application/json">` data block: `<`, `>`, `&` and the line separators
 * are written as `\u` escapes, so no value can close the element or open a comment.
 */
export function jsonForScript(value: unknown): SafeHtml {
  const text = JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v))
    .replace(/</g, "\\u003c")
    .replace(/>/g, "\\u003e")
    .replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028")
    .replace(/\u2029/g, "\\u2029");
  return new SafeHtml(text);
}
