/**
 * The dashboard in a real browser (playwright-core driving the machine's Chromium) over a real devnet,
 * facilitator and marketplace: a provider signs in and sees a revenue chart whose numbers are the
 * analytics API's for the same range, retries a dead webhook delivery and sees it delivered, creates
 * and deprecates a plan; the agent operator sees an agent's spend by tool after a run. Screenshots of
 * the main views go to a temporary directory, or to docs/images/ with TOLLGATE_UPDATE_IMAGES=1
 * (`npm run docs:images`), so a plain test run leaves the tree clean. Skipped, saying so, when no
 * Chromium is installed (`apt-get install -y chromium chromium-driver`; .ci/run installs it).
 */
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, get as httpGet, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { AxeBuilder } from "@axe-core/playwright";
import type { ToolMessage } from "@langchain/core/messages";
import { type Browser, chromium, type Page } from "playwright-core";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { agentDashboard } from "../src/agent/dashboard/agentSection.ts";
import { startRunRecording } from "../src/agent/dashboard/runSpendRecords.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import { createSpendCollector, type SpendReport } from "../src/agent/spendReport.ts";
import { getPlan } from "../src/chain/actions/subscriptions/getPlan.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { base64UrlEncode } from "../src/protocol/base64.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { type AgentStack, sellerNamed, startAgentStack } from "./support/agentStack.ts";

const CHROMIUM = process.env.TOLLGATE_CHROMIUM ?? "/usr/bin/chromium";
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) {
  console.warn(
    `dashboard browser tests skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium chromium-driver, or set TOLLGATE_CHROMIUM)`,
  );
}

// The documentation's screenshots are refreshed on request only: every run would otherwise rewrite them.
const updateImages = process.env.TOLLGATE_UPDATE_IMAGES === "1";
const DOC_IMAGES = fileURLToPath(new URL("../docs/images/", import.meta.url));
const TEXT =
  "The harbour reopened on Monday after a week of storms. Fishing boats returned before dawn. " +
  "Traders said the catch was excellent and prices fell. The council promised new breakwaters by spring.";
const AGENT = "dashboard-researcher";
const agentToken = base64UrlEncode(randomBytes(24));

let stack: AgentStack | undefined;
let browser: Browser | undefined;
let receiver: Server | undefined;
let receiverUrl = "";
let received = 0;
let report: SpendReport;
let store: Store | undefined;
let images = DOC_IMAGES;

/** A webhook receiver that fails its first delivery and accepts every later one. */
async function startReceiver(): Promise<void> {
  receiver = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received += 1;
      res.writeHead(received === 1 ? 500 : 200).end();
    });
  });
  await new Promise<void>((resolve) => receiver!.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(receiver!.address() as AddressInfo).port}/hooks`;
}

/** A GET with the given `Accept-Encoding`, its body as sent (node's fetch would decompress it). */
async function rawGet(
  url: string,
  acceptEncoding: string,
): Promise<{ encoding?: string; vary?: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    httpGet(url, { headers: { "accept-encoding": acceptEncoding } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () =>
        resolve({
          ...(res.headers["content-encoding"] === undefined
            ? {}
            : { encoding: res.headers["content-encoding"] }),
          ...(res.headers.vary === undefined ? {} : { vary: res.headers.vary }),
          body: Buffer.concat(chunks),
        }),
      );
    }).on("error", reject);
  });
}

/** Accessibility violations on the page as it is (every axe rule for WCAG 2.1 A and AA, and best practice). */
async function axeViolations(page: Page): Promise<string[]> {
  const result = await new AxeBuilder({ page })
    .withTags(["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"])
    .analyze();
  return result.violations.map(
    (v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`,
  );
}

/** The elements that stick out of the window on the right (the page scrolls sideways); none wanted. */
async function overflowsSideways(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth <= width) return [];
    return [...document.querySelectorAll("body *")]
      .filter((el) => el.getBoundingClientRect().right > width + 1)
      .map((el) => `${el.tagName.toLowerCase()}${el.id === "" ? "" : `#${el.id}`}.${el.className}`);
  });
}

async function signInProvider(page: Page, url: string, apiKey: string): Promise<void> {
  await page.goto(`${url}/dashboard/login`);
  await page.fill("#provider-key", apiKey);
  await Promise.all([page.waitForURL(/\/dashboard\/provider$/), page.click("#provider-login button")]);
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(images, `${name}.png`), type: "png" });
}

describe.skipIf(!hasChromium)("dashboard in the browser", () => {
  beforeAll(async () => {
    if (!updateImages) images = mkdtempSync(join(tmpdir(), "tollgate-dashboard-shots-"));
    await startReceiver();
    let accounts: AgentStack["devnet"]["accounts"] = [];
    // One store for the facilitator and the agents, as in the demo.
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    stack = await startAgentStack({
      facilitator: {
        store,
        webhooks: {
          allowTargets: ["127.0.0.0/8", "::1"],
          retry: { maxAttempts: 1 },
          pollIntervalMs: 100,
        },
        dashboard: {
          agents: agentDashboard({ store, token: agentToken }),
          // The devnet's dev keys: a provider signed in here may send its own plan transactions.
          planSigner: (provider: Address) => {
            const found = accounts.find((a) => a.address === provider);
            return found === undefined ? undefined : stack!.devnet.walletClient(found);
          },
          indexWaitMs: 10_000,
        },
      },
    });
    accounts = stack.devnet.accounts;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
    await store?.close();
    await new Promise<void>((resolve) =>
      receiver === undefined ? resolve() : receiver.close(() => resolve()),
    );
    if (images !== DOC_IMAGES) rmSync(images, { recursive: true, force: true });
  });

  it("runs an agent that buys the summarizer's and the linguist's tools (recording the run)", async () => {
    const { devnet, tf, market } = stack!;
    const summarizer = sellerNamed(stack!, "summarizer");
    // The summarizer's webhook endpoint, registered before anything is bought.
    const registered = await fetch(`${tf.url}/webhooks`, {
      method: "POST",
      headers: { authorization: `Bearer ${summarizer.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ url: receiverUrl, description: "dashboard test receiver" }),
    });
    expect(registered.status).toBe(201);

    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 10_000_000n });
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
    const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await budget.setLimits(AGENT, { total: 2_000_000n, perCall: 500_000n });
    const spend = createSpendCollector();
    const run = startRunRecording(tf.store, { agent: AGENT, clock: systemClock });
    const tools = await discoverTools({
      market: market.url,
      agent: AGENT,
      payer,
      budget,
      calls: createCallCounter({ clock: systemClock }),
      forecast: (tool) => (tool === "summarize" ? { calls: 100, horizonSeconds: 30 * 86_400 } : undefined),
      onSpend: (event) => {
        spend.record(event);
        run.record(event);
      },
    });
    const call = async (name: string, args: Record<string, unknown>, id: string) => {
      const tool = tools.find((d) => d.tool.name === name)?.tool;
      if (tool === undefined) throw new Error(`no tool ${name}`);
      return (await tool.invoke({ type: "tool_call", id, name, args })) as ToolMessage;
    };
    for (let i = 0; i < 3; i++) await call("summarize", { text: TEXT, sentences: 1 }, `s${i}`);
    for (let i = 0; i < 2; i++) await call("detect-language", { text: TEXT }, `d${i}`);
    await run.finish();
    report = spend.report();
    expect(report.tools.map((t) => t.tool).sort()).toEqual(["detect-language", "summarize"]);
    expect(report.total).toBeGreaterThan(0n);
  }, 120_000);

  it("signs a provider in with its API key, and the revenue chart shows the analytics API's numbers", async () => {
    const { tf } = stack!;
    const summarizer = sellerNamed(stack!, "summarizer");
    const page = await browser!.newPage({ viewport: { width: 1200, height: 900 } });
    await page.goto(`${tf.url}/dashboard`);
    expect(new URL(page.url()).pathname).toBe("/dashboard/login");
    await page.fill("#provider-key", summarizer.apiKey);
    await Promise.all([page.waitForURL(/\/dashboard\/provider$/), page.click("#provider-login button")]);
    expect(page.url()).not.toContain(summarizer.apiKey);

    const now = Date.now();
    const from = new Date(Math.floor(now / 3_600_000) * 3_600_000 - 5 * 3_600_000).toISOString();
    const to = new Date(Math.floor(now / 3_600_000) * 3_600_000 + 3_600_000).toISOString();
    const range = `bucket=hour&from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`;
    await page.goto(`${tf.url}/dashboard/provider?${range}`);
    await page.waitForSelector('[data-chart="chart-scheme"][data-drawn="true"]');
    const chart = (await page.evaluate(() => {
      const charts = (window as unknown as { tollgateCharts: Record<string, { data: number[][] }> })
        .tollgateCharts;
      return { scheme: charts["chart-scheme"]?.data, plan: charts["chart-plan"]?.data };
    })) as { scheme: number[][]; plan: number[][] | undefined };
    const api = (await (
      await fetch(`${tf.url}/analytics/volume?${range}`, {
        headers: { authorization: `Bearer ${summarizer.apiKey}` },
      })
    ).json()) as {
      buckets: {
        start: string;
        volume: string;
        schemes: Record<string, { volume: string }>;
        plans: { planId: string; volume: string }[];
      }[];
    };
    const usdc = (v: string) => Number(v) / 1e6;
    expect(chart.scheme[0]).toEqual(api.buckets.map((b) => Date.parse(b.start) / 1000));
    ["one-time", "subscription", "metered"].forEach((scheme, i) => {
      expect(chart.scheme[i + 1]).toEqual(api.buckets.map((b) => usdc(b.schemes[scheme]!.volume)));
    });
    const planIds = [...new Set(api.buckets.flatMap((b) => b.plans.map((p) => p.planId)))].sort(
      (a, b) => Number(a) - Number(b),
    );
    expect(planIds.length).toBeGreaterThan(0);
    planIds.forEach((id, i) => {
      expect(chart.plan?.[i + 1]).toEqual(
        api.buckets.map((b) => usdc(b.plans.find((p) => p.planId === id)?.volume ?? "0")),
      );
    });
    // The agent's subscription to the summarizer is revenue of this range.
    expect(api.buckets.some((b) => BigInt(b.schemes.subscription!.volume) > 0n)).toBe(true);
    await shot(page, "dashboard-revenue");
    await page.goto(`${tf.url}/dashboard/provider/subscriptions`);
    expect(Number(await page.textContent('[data-state="Active"]'))).toBeGreaterThan(0);
    await shot(page, "dashboard-subscriptions");
    await page.close();
  }, 60_000);

  it("retries a dead webhook delivery and shows it delivered", async () => {
    const { tf } = stack!;
    const summarizer = sellerNamed(stack!, "summarizer");
    const page = await browser!.newPage({ viewport: { width: 1200, height: 900 } });
    await page.goto(`${tf.url}/dashboard/login`);
    await page.fill("#provider-key", summarizer.apiKey);
    await Promise.all([page.waitForURL(/\/dashboard\/provider$/), page.click("#provider-login button")]);
    // The receiver refused the first delivery; with one attempt allowed it is a dead letter.
    let dead: string | null = null;
    for (let i = 0; i < 100 && dead === null; i++) {
      await page.goto(`${tf.url}/dashboard/provider/webhooks`);
      dead = await page
        .getAttribute('[data-status="dead"] >> xpath=ancestor::tr', "data-delivery-row")
        .catch(() => null);
      if (dead === null) await new Promise((r) => setTimeout(r, 200));
    }
    expect(dead).not.toBeNull();
    await Promise.all([page.waitForURL(/done=retried/), page.click(`button[data-delivery="${dead}"]`)]);
    let status: string | null = null;
    for (let i = 0; i < 100 && status !== "delivered"; i++) {
      await page.goto(`${tf.url}/dashboard/provider/webhooks`);
      status = await page.getAttribute(`tr[data-delivery-row="${dead}"] [data-status]`, "data-status");
      if (status !== "delivered") await new Promise((r) => setTimeout(r, 200));
    }
    expect(status).toBe("delivered");
    // The receiver saw the refused first attempt and the retried one it accepted.
    expect(received).toBeGreaterThanOrEqual(2);
    expect(await page.textContent(`tr[data-delivery-row="${dead}"]`)).toContain("HTTP 200");
    await shot(page, "dashboard-webhooks");
    await page.close();
  }, 60_000);

  it("creates a plan and deprecates it with a successor, on chain and in the view", async () => {
    const { tf, devnet } = stack!;
    const summarizer = sellerNamed(stack!, "summarizer");
    const successor = summarizer.plans.summarize!.planId.toString();
    const page = await browser!.newPage({ viewport: { width: 1200, height: 900 } });
    await page.goto(`${tf.url}/dashboard/login`);
    await page.fill("#provider-key", summarizer.apiKey);
    await Promise.all([page.waitForURL(/\/dashboard\/provider$/), page.click("#provider-login button")]);
    await page.goto(`${tf.url}/dashboard/provider/plans`);
    await page.fill('#create-plan input[name="amount"]', "3");
    await page.fill('#create-plan input[name="interval"]', "30d");
    await Promise.all([page.waitForURL(/done=created/), page.click("#create-plan button")]);
    const created = await page.getAttribute("tr[data-plan-row]", "data-plan-row");
    expect(created).not.toBe(successor);
    await page.selectOption(`form[data-plan="${created}"] select`, successor);
    await Promise.all([
      page.waitForURL(/done=deprecated/),
      page.click(`form[data-plan="${created}"] button`),
    ]);
    expect(await page.textContent(`tr[data-plan-row="${created}"]`)).toContain(
      `deprecated → plan ${successor}`,
    );
    const onChain = await getPlan(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      planId: BigInt(created!),
    });
    expect(onChain.deprecated).toBe(true);
    expect(onChain.successorPlanId).toBe(BigInt(successor));
    await shot(page, "dashboard-plans");
    await page.close();
  }, 60_000);

  it("shows the agent operator the agent's spend by tool, as the run's spend report has it", async () => {
    const { tf } = stack!;
    const page = await browser!.newPage({ viewport: { width: 1200, height: 900 } });
    await page.goto(`${tf.url}/dashboard/login`);
    await page.fill("#agent-token", agentToken);
    await Promise.all([page.waitForURL(/\/dashboard\/agents$/), page.click("#agent-login button")]);
    await page.click(`a[href="/dashboard/agents/${AGENT}"]`);
    await page.waitForSelector('[data-chart="chart-agent-tools"][data-drawn="true"]');
    for (const tool of report.tools) {
      expect(
        await page.getAttribute(`#spend-by-tool tr[data-key="${tool.tool}"] [data-amount]`, "data-amount"),
      ).toBe(tool.amount.toString());
    }
    const latest = (await page.textContent("#latest-run")) ?? "";
    for (const tool of report.tools) expect(latest).toContain(tool.tool);
    await shot(page, "dashboard-agent");
    await page.close();
  }, 60_000);

  it("every view passes axe at 1440 and 390 px, light and dark, and never scrolls sideways on a phone", async () => {
    const { tf } = stack!;
    const summarizer = sellerNamed(stack!, "summarizer");
    // axe needs a page of its own context.
    const context = await browser!.newContext({ viewport: { width: 1440, height: 900 } });
    const page = await context.newPage();
    const check = async (paths: readonly string[]) => {
      for (const [width, colorScheme] of [
        [1440, "light"],
        [1440, "dark"],
        [390, "light"],
        [390, "dark"],
      ] as const) {
        await page.setViewportSize({ width, height: 844 });
        await page.emulateMedia({ colorScheme });
        for (const path of paths) {
          await page.goto(`${tf.url}${path}`);
          for (const el of await page.$$("[data-chart]")) {
            expect(await el.getAttribute("data-drawn"), `${path} chart drawn`).toBe("true");
          }
          expect(await axeViolations(page), `${path} at ${width} px, ${colorScheme}`).toEqual([]);
          if (width === 390) expect(await overflowsSideways(page), `${path} at 390 px`).toEqual([]);
        }
      }
    };
    await check(["/dashboard/login"]);
    await signInProvider(page, tf.url, summarizer.apiKey);
    const nav = await page.$$eval("header.top nav a", (links) =>
      links.map((a) => a.getAttribute("href") ?? ""),
    );
    expect(nav.length).toBeGreaterThan(2);
    // A provider asking for the agents' pages sees an error page that keeps the provider's navigation.
    await check([...nav, "/dashboard/provider?bucket=day", "/dashboard/agents"]);
    await page.goto(`${tf.url}/dashboard/agents`);
    expect(
      await page.$$eval("header.top nav a", (links) => links.map((a) => a.getAttribute("href"))),
    ).toEqual(nav);

    await context.clearCookies();
    await page.goto(`${tf.url}/dashboard/login`);
    await page.fill("#agent-token", agentToken);
    await Promise.all([page.waitForURL(/\/dashboard\/agents$/), page.click("#agent-login button")]);
    await check(["/dashboard/agents", `/dashboard/agents/${AGENT}`]);
    await context.close();
  }, 180_000);

  it("highlights the selected range, carries a favicon and draws charts in UTC that follow the window", async () => {
    const { tf } = stack!;
    const summarizer = sellerNamed(stack!, "summarizer");
    const page = await browser!.newPage({ viewport: { width: 1440, height: 900 } });
    const scripts: Record<string, string | undefined> = {};
    page.on("response", (response) => {
      if (response.url().includes("/dashboard/assets/")) {
        scripts[new URL(response.url()).pathname] = response.headers()["content-encoding"];
      }
    });
    await signInProvider(page, tf.url, summarizer.apiKey);
    await page.goto(`${tf.url}/dashboard/provider?bucket=day`);
    await page.waitForSelector('[data-chart="chart-scheme"][data-drawn="true"]');
    // The browser asked for compressed assets and got brotli.
    expect(scripts["/dashboard/assets/dashboard.js"]).toBe("br");
    expect(scripts["/dashboard/assets/dashboard.css"]).toBe("br");

    const background = (selector: string) =>
      page.$eval(selector, (el) => getComputedStyle(el).backgroundColor);
    expect(await page.textContent(".controls a.button.primary")).toContain("30 days");
    expect(await background(".controls a.button.primary")).not.toBe(
      await background(".controls a.button:not(.primary)"),
    );
    expect(await page.getAttribute('link[rel="icon"]', "href")).toMatch(/^data:image\/svg\+xml,/);

    // Today's charges alone in a 30-day range are bars, not a spike from zero.
    expect(await page.getAttribute('[data-chart="chart-scheme"]', "data-kind")).toBe("bars");
    const label = (await page.getAttribute('[data-chart="chart-scheme"] [role="img"]', "aria-label")) ?? "";
    expect(label).toContain("Volume by scheme");
    expect(label).toContain("UTC");
    expect(label).toMatch(/subscription: [0-9.]+ USDC in all, most [0-9.]+ USDC at \d{4}-\d\d-\d\d UTC/);
    expect(await page.textContent('[data-chart="chart-scheme"]')).toContain("UTC");

    const chartWidth = () =>
      page.evaluate(
        () =>
          (window as unknown as { tollgateCharts: Record<string, { width: number }> }).tollgateCharts[
            "chart-scheme"
          ]!.width,
      );
    const wide = await chartWidth();
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForFunction(
      (before) =>
        (window as unknown as { tollgateCharts: Record<string, { width: number }> }).tollgateCharts[
          "chart-scheme"
        ]!.width < before,
      wide,
    );
    expect(await chartWidth()).toBeLessThanOrEqual(390);
    expect(await overflowsSideways(page)).toEqual([]);
    await page.close();
  }, 60_000);

  it("serves its scripts and styles gzip- or brotli-compressed when the request allows it", async () => {
    const { tf } = stack!;
    const url = `${tf.url}/dashboard/assets/dashboard.js`;
    const plain = await rawGet(url, "identity");
    expect(plain.encoding).toBeUndefined();
    const gzipped = await rawGet(url, "gzip");
    expect(gzipped.encoding).toBe("gzip");
    expect(gzipped.vary).toBe("accept-encoding");
    expect(gzipped.body.length).toBeLessThan(plain.body.length);
    expect(gunzipSync(gzipped.body).equals(plain.body)).toBe(true);
    expect((await rawGet(url, "gzip;q=0, br;q=0")).encoding).toBeUndefined();
    expect((await rawGet(`${tf.url}/dashboard/assets/uPlot.min.js`, "gzip, br")).encoding).toBe("br");
  });
});
