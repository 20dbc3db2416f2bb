import { describe, expect, it } from "vitest";
import { escapeHtml, html, jsonForScript } from "./html.ts";

describe("html", () => {
  it("escapes every interpolated value, in text and in attributes", () => {
    const hostile = `"><script>alert('x')</script>&\``;
    const out = html`<a title="${hostile}">${hostile}</a>`.value;
    expect(out).toBe(
      `<a title="&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&#96;">&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&#96;</a>`,
    );
  });

  it("keeps markup built by html itself, joins arrays, and drops null, undefined and false", () => {
    const cells = ["<a>", "b"].map((t) => html`<td>${t}</td>`);
    expect(html`<tr>${cells}${null}${undefined}${false}${0}${5n}</tr>`.value).toBe(
      "<tr><td>&lt;a&gt;</td><td>b</td>05</tr>",
    );
  });

  it("writes JSON that cannot close its script element or open a comment", () => {
    const text = jsonForScript({ label: "</script><!--", amount: 10n, sep: "\u2028" }).value;
    expect(text).not.toMatch(/[<>&]/);
    expect(JSON.parse(text)).toEqual({ label: "</script><!--", amount: "10", sep: "\u2028" });
  });

  it("escapes the five HTML-special characters and the backtick", () => {
    expect(escapeHtml(`&<>"'\``)).toBe("&amp;&lt;&gt;&quot;&#39;&#96;");
  });
});
