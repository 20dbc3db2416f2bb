import { describe, expect, it } from "vitest";
import { rangeForm, table } from "./dashboardLayout.ts";
import { html } from "./html.ts";

describe("rangeForm", () => {
  it("is a GET form whose dates are the range's UTC days, the end rounded up to the next midnight", () => {
    const form = rangeForm("/dashboard/provider", {
      bucket: "day",
      from: new Date("2026-11-06T10:00:00Z"),
      to: new Date("2026-12-06T10:00:00Z"),
    }).value;
    expect(form).toContain('method="get" action="/dashboard/provider"');
    expect(form).toContain('name="from" value="2026-11-06"');
    expect(form).toContain('name="to" value="2026-12-07"');
    expect(form).toContain('<option value="day" selected>');
    expect(form).not.toContain('<option value="hour" selected>');
  });

  it("keeps a range that ends at midnight ending there", () => {
    const form = rangeForm("/x", {
      bucket: "hour",
      from: new Date("2026-12-01T00:00:00Z"),
      to: new Date("2026-12-03T00:00:00Z"),
    }).value;
    expect(form).toContain('name="to" value="2026-12-03"');
    expect(form).toContain('<option value="hour" selected>');
  });
});

describe("table", () => {
  it("wraps the table in a focusable box of its own and names an empty header for screen readers", () => {
    expect(table(["Plan", ""], [], "none").value).toBe('<p class="muted">none</p>');
    const out = table(["Plan", ""], [html`<tr><td>1</td><td></td></tr>`], "none").value;
    expect(out).toMatch(/^<div class="table-scroll" tabindex="0"><table>/);
    expect(out).toContain('<th>Plan</th><th><span class="visually-hidden">Actions</span></th>');
  });
});
