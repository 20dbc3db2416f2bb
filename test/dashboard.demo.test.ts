/**
 * `npm run demo -- --keep`: the demo prints its dashboard's address and the agent operator's token,
 * keeps everything up after it finishes, and the dashboard shows the researcher's spend by tool as the
 * demo's spend report has it; aborting (Ctrl-C) then stops everything.
 */
import { describe, expect, it } from "vitest";
import { runDemo } from "../agents/demo.ts";

// The whole demo runs (devnet, facilitator, agents): ~25 s on a quiet machine, more under CI load.
describe("the demo's dashboard", { timeout: 120_000 }, () => {
  it("stays up with keep, and shows the research agent's spend by tool as the spend report has it", async () => {
    const lines: string[] = [];
    const controller = new AbortController();
    let up: () => void = () => {};
    const stayingUp = new Promise<void>((resolve) => {
      up = resolve;
    });
    const demo = runDemo({
      print: (line) => {
        lines.push(line);
        if (line.includes("stays up")) up();
      },
      env: {},
      signal: controller.signal,
      keep: true,
      maxDocuments: 1,
    });
    await Promise.race([stayingUp, demo]);
    const url = /dashboard\s+(http:\/\/\S+\/dashboard)/.exec(lines.join("\n"))?.[1];
    const token = /the token (\S+)/.exec(lines.join("\n"))?.[1];
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/dashboard$/);
    expect(token).toMatch(/^[A-Za-z0-9_-]{32}$/);

    const origin = new URL(url!).origin;
    const login = await fetch(`${url}/login`);
    const csrf = /name="_csrf" value="([^"]+)"/.exec(await login.text())?.[1] ?? "";
    const loginCookie = login.headers.getSetCookie()[0]?.split(";")[0] ?? "";
    const signIn = await fetch(`${url}/login`, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie: loginCookie, origin },
      body: new URLSearchParams({ _csrf: csrf, kind: "agent", secret: token! }).toString(),
    });
    expect(signIn.status).toBe(303);
    const cookie =
      signIn.headers
        .getSetCookie()
        .find((c) => c.startsWith("tollgate_session="))
        ?.split(";")[0] ?? "";
    const page = await (await fetch(`${url}/agents/researcher`, { headers: { cookie } })).text();

    controller.abort();
    const result = await demo;
    expect(result.report.tools.length).toBeGreaterThan(0);
    for (const tool of result.report.tools) {
      const row = new RegExp(
        `<tr data-key="${tool.tool}"><td>[^<]*</td><td class="num" data-amount="(\\d+)"`,
      ).exec(page.slice(page.indexOf('id="spend-by-tool"')));
      expect(row?.[1], tool.tool).toBe(tool.amount.toString());
    }
    expect(page).toContain('id="latest-run"');
  }, 300_000);
});
