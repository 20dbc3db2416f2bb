/**
 * The dashboard's defences, through `app.request()` over a real store (no browser, no chain): sign-in
 * only by form, cookies HttpOnly and SameSite=Strict, CSRF and same-origin on every action, escaped
 * output, a strict CSP, sessions that expire and end with their key, rate-limited sign-in, sign-out.
 */
import { randomBytes } from "node:crypto";
import pino from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { agentSection } from "../src/agent/dashboard/agentSection.ts";
import { createDashboardApp } from "../src/facilitator/dashboard/dashboardApp.ts";
import { providerSection } from "../src/facilitator/dashboard/providerSection.ts";
import { mountWebhookViews } from "../src/facilitator/dashboard/webhookViews.ts";
import { hashApiKey } from "../src/facilitator/providers/requireProvider.ts";
import { createWebhookRepository } from "../src/facilitator/webhooks/createWebhookRepository.ts";
import { createWebhookSecretBox } from "../src/facilitator/webhooks/webhookSecretBox.ts";
import { base64UrlEncode } from "../src/protocol/base64.ts";
import { createFixedClock } from "../src/protocol/clock.ts";
import { mountPlanViews } from "../src/schemes/subscription/facilitator/planViews.ts";
import { upsertPlan } from "../src/schemes/subscription/facilitator/subscriptionRecords.ts";
import { mountSubscriptionViews } from "../src/schemes/subscription/facilitator/subscriptionViews.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";

const ORIGIN = "http://dash.test";
const provider = "0x00000000000000000000000000000000000000aa";
const agentToken = base64UrlEncode(randomBytes(24));
const token = { decimals: 6, symbol: "USDC" };
let store: Store;
let apiKey: string;
let keyId: number;
const clock = createFixedClock(Date.parse("2026-11-22T12:00:00Z"));

function makeApp(options: { loginLimit?: { capacity: number; refillPerSecond: number } } = {}) {
  const repository = createWebhookRepository({
    store,
    randomBytes: (n) => new Uint8Array(randomBytes(n)),
    secrets: createWebhookSecretBox([new Uint8Array(randomBytes(32))]),
  });
  return {
    repository,
    app: createDashboardApp({
      sessionStore: store,
      providerKeys: store,
      agentToken,
      sections: [
        providerSection({ store, clock, token }, [
          mountWebhookViews({ repository, clock }),
          mountSubscriptionViews({ store, token, scope: undefined }),
        ]),
        agentSection({ store: (work) => work(store), clock, token }),
      ],
      clock,
      logger: pino({ level: "silent" }),
      loginLimit: options.loginLimit,
    }),
  };
}

type App = ReturnType<typeof makeApp>["app"];

/** Cookies from a response's Set-Cookie headers, as `name=value` pairs. */
function cookiesOf(res: Response): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of res.headers.getSetCookie()) {
    const [pair = ""] = line.split(";");
    const [name = "", ...value] = pair.split("=");
    out[name.trim()] = value.join("=");
  }
  return out;
}

async function loginForm(app: App) {
  const res = await app.request(`${ORIGIN}/login`);
  const page = await res.text();
  const csrf = /name="_csrf" value="([^"]+)"/.exec(page)?.[1] ?? "";
  return { res, page, csrf, cookie: `tollgate_login=${cookiesOf(res).tollgate_login}` };
}

async function signIn(app: App, kind = "provider", secret = apiKey, headers: Record<string, string> = {}) {
  const form = await loginForm(app);
  return app.request(`${ORIGIN}/login`, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      cookie: form.cookie,
      origin: ORIGIN,
      "sec-fetch-site": "same-origin",
      ...headers,
    },
    body: new URLSearchParams({ _csrf: form.csrf, kind, secret }).toString(),
  });
}

async function session(app: App, kind = "provider", secret = apiKey) {
  const res = await signIn(app, kind, secret);
  expect(res.status).toBe(303);
  const cookie = `tollgate_session=${cookiesOf(res).tollgate_session}`;
  const page = await (
    await app.request(`${ORIGIN}/${kind === "agent" ? "agents" : "provider/webhooks"}`, {
      headers: { cookie },
    })
  ).text();
  const csrf = /name="_csrf" value="([^"]+)"/.exec(page)?.[1] ?? "";
  return { cookie, csrf, page };
}

function post(
  app: App,
  path: string,
  cookie: string,
  fields: Record<string, string>,
  headers: Record<string, string> = {},
) {
  return app.request(`${ORIGIN}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      cookie,
      origin: ORIGIN,
      "sec-fetch-site": "same-origin",
      ...headers,
    },
    body: new URLSearchParams(fields).toString(),
  });
}

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  await store.query("INSERT INTO providers (address) VALUES ($1)", [provider]);
});

beforeEach(async () => {
  apiKey = `tg_${base64UrlEncode(randomBytes(24))}`;
  const [row] = await store.query(
    "INSERT INTO provider_api_keys (provider, key_hash, prefix) VALUES ($1, $2, $3) RETURNING id",
    [provider, hashApiKey(apiKey), apiKey.slice(0, 8)],
  );
  keyId = Number((row as { id: string | number }).id);
});

afterAll(async () => {
  await store?.close();
});

describe("dashboard security", () => {
  it("serves every page with a strict CSP, no framing, nosniff, a same-origin referrer policy and no caching", async () => {
    const { app } = makeApp();
    for (const res of [await app.request(`${ORIGIN}/login`), await app.request(`${ORIGIN}/provider`)]) {
      const csp = res.headers.get("content-security-policy") ?? "";
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain("default-src 'none'");
      expect(csp).not.toContain("unsafe-inline");
      expect(csp).not.toContain("unsafe-eval");
      expect(res.headers.get("x-frame-options")).toBe("DENY");
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(res.headers.get("referrer-policy")).toBe("same-origin");
      expect(res.headers.get("cache-control")).toBe("no-store");
    }
  });

  it("has no inline script in its pages: every script is a file of its own origin", async () => {
    const { app } = makeApp();
    const { cookie } = await session(app);
    const page = await (await app.request(`${ORIGIN}/provider`, { headers: { cookie } })).text();
    const scripts = [...page.matchAll(/<script([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.length).toBeGreaterThan(0);
    for (const [, attrs = "", body = ""] of scripts) {
      if (/type="application\/json"/.test(attrs)) continue;
      expect(attrs).toMatch(/src="\/dashboard\/assets\/[A-Za-z.]+\.js"/);
      expect(body.trim()).toBe("");
    }
    expect(page).not.toMatch(/\son[a-z]+=/i);
  });

  it("serves uPlot and its own script from its origin, and no other file", async () => {
    const { app } = makeApp();
    const uplot = await app.request(`${ORIGIN}/assets/uPlot.min.js`);
    expect(uplot.status).toBe(200);
    expect(uplot.headers.get("content-type")).toContain("javascript");
    expect(await uplot.text()).toContain("uPlot");
    expect((await app.request(`${ORIGIN}/assets/..%2F..%2Fpackage.json`)).status).toBe(404);
    expect((await app.request(`${ORIGIN}/assets/dashboardApp.ts`)).status).toBe(404);
  });

  it("signs in with the API key in a form body only, into an HttpOnly SameSite=Strict session cookie", async () => {
    const { app } = makeApp();
    const res = await signIn(app);
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/dashboard/provider");
    const setCookie = res.headers.getSetCookie().find((c) => c.startsWith("tollgate_session=")) ?? "";
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    expect(setCookie).toMatch(/Path=\/dashboard/);
    expect(setCookie).not.toContain(apiKey);
    const cookie = `tollgate_session=${cookiesOf(res).tollgate_session}`;
    for (const path of ["/provider", "/provider/payments", "/provider/subscriptions", "/provider/webhooks"]) {
      const page = await app.request(`${ORIGIN}${path}`, { headers: { cookie } });
      expect(page.status).toBe(200);
      expect(await page.text()).not.toContain(apiKey);
    }
  });

  it("does not accept the API key in a URL or a header: only the sign-in form opens a session", async () => {
    const { app } = makeApp();
    const byQuery = await app.request(`${ORIGIN}/provider?key=${apiKey}&apiKey=${apiKey}`);
    expect(byQuery.status).toBe(303);
    expect(byQuery.headers.get("location")).toBe("/dashboard/login");
    const byHeader = await app.request(`${ORIGIN}/provider`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    expect(byHeader.status).toBe(303);
  });

  it("refuses a sign-in without the login form's token, or from another site or origin", async () => {
    const { app } = makeApp();
    const form = await loginForm(app);
    const body = new URLSearchParams({ _csrf: form.csrf, kind: "provider", secret: apiKey }).toString();
    const type = { "content-type": "application/x-www-form-urlencoded" };
    const noCookie = await app.request(`${ORIGIN}/login`, { method: "POST", headers: type, body });
    expect(noCookie.status).toBe(403);
    const crossSite = await app.request(`${ORIGIN}/login`, {
      method: "POST",
      headers: { ...type, cookie: form.cookie, "sec-fetch-site": "cross-site" },
      body,
    });
    expect(crossSite.status).toBe(403);
    const otherOrigin = await app.request(`${ORIGIN}/login`, {
      method: "POST",
      headers: { ...type, cookie: form.cookie, origin: "https://evil.example" },
      body,
    });
    expect(otherOrigin.status).toBe(403);
    expect(otherOrigin.headers.getSetCookie().some((c) => c.startsWith("tollgate_session="))).toBe(false);
  });

  it("refuses an unknown or revoked key with 401 and opens no session", async () => {
    const { app } = makeApp();
    const wrong = `tg_${base64UrlEncode(randomBytes(24))}`;
    const res = await signIn(app, "provider", wrong);
    expect(res.status).toBe(401);
    expect(await res.text()).not.toContain(wrong);
    expect(res.headers.getSetCookie().some((c) => c.startsWith("tollgate_session="))).toBe(false);
    await store.query("UPDATE provider_api_keys SET revoked_at = now() WHERE id = $1", [keyId]);
    expect((await signIn(app)).status).toBe(401);
  });

  it("rate-limits sign-in attempts: past the limit a 429 with Retry-After, even for the right key", async () => {
    const { app } = makeApp({ loginLimit: { capacity: 3, refillPerSecond: 0.01 } });
    for (let i = 0; i < 3; i++) expect((await signIn(app, "provider", "tg_wrong")).status).toBe(401);
    const limited = await signIn(app);
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0);
  });

  it("refuses every action without the session's CSRF token, with a wrong one, or cross-origin", async () => {
    const { app, repository } = makeApp();
    const endpoint = await repository.create(
      provider,
      { url: "https://hooks.example/x" },
      new Date(clock.now()),
    );
    const { cookie, csrf } = await session(app);
    const path = `/provider/webhooks/${endpoint.id}/rotate`;
    expect((await post(app, path, cookie, {})).status).toBe(403);
    // Another last character (a token that already ended in "A" made this the right one, 1 run in 64).
    const wrong = `${csrf.slice(0, -1)}${csrf.endsWith("A") ? "B" : "A"}`;
    expect((await post(app, path, cookie, { _csrf: wrong })).status).toBe(403);
    expect((await post(app, path, cookie, { _csrf: csrf }, { origin: "https://evil.example" })).status).toBe(
      403,
    );
    expect((await post(app, path, cookie, { _csrf: csrf }, { "sec-fetch-site": "same-site" })).status).toBe(
      403,
    );
    const json = await app.request(`${ORIGIN}${path}`, {
      method: "POST",
      headers: { cookie, "content-type": "application/json", origin: ORIGIN },
      body: JSON.stringify({ _csrf: csrf }),
    });
    expect(json.status).toBe(400);
    // Nothing rotated so far; with the token it does, and shows the new secret once.
    expect((await repository.list(provider, new Date(clock.now())))[0]?.previousSecretExpiresAt).toBeNull();
    const ok = await post(app, path, cookie, { _csrf: csrf });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toMatch(/id="new-secret">whsec_/);
    expect(
      (await repository.list(provider, new Date(clock.now())))[0]?.previousSecretExpiresAt,
    ).not.toBeNull();
  });

  it("escapes everything it shows: a description with markup is text", async () => {
    const { app, repository } = makeApp();
    await repository.create(
      provider,
      {
        url: "https://hooks.example/<b>",
        description: `<script>alert("x")</script><img src=x onerror=alert(1)>`,
      },
      new Date(clock.now()),
    );
    const { cookie } = await session(app);
    const page = await (await app.request(`${ORIGIN}/provider/webhooks`, { headers: { cookie } })).text();
    expect(page).not.toContain("<script>alert");
    expect(page).not.toContain("<img src=x");
    expect(page).toContain("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;");
  });

  it("ends a session after 30 idle minutes, and after 8 hours however busy", async () => {
    const { app } = makeApp();
    const { cookie } = await session(app);
    clock.advance(29 * 60_000);
    expect((await app.request(`${ORIGIN}/provider`, { headers: { cookie } })).status).toBe(200);
    clock.advance(31 * 60_000);
    expect((await app.request(`${ORIGIN}/provider`, { headers: { cookie } })).headers.get("location")).toBe(
      "/dashboard/login",
    );
    const busy = await session(app);
    for (let i = 0; i < 23; i++) {
      clock.advance(20 * 60_000);
      expect((await app.request(`${ORIGIN}/provider`, { headers: { cookie: busy.cookie } })).status).toBe(
        200,
      );
    }
    clock.advance(20 * 60_000);
    expect((await app.request(`${ORIGIN}/provider`, { headers: { cookie: busy.cookie } })).status).toBe(303);
  });

  it("ends a provider's session when the API key it signed in with is revoked", async () => {
    const { app } = makeApp();
    const { cookie } = await session(app);
    await store.query("UPDATE provider_api_keys SET revoked_at = now() WHERE id = $1", [keyId]);
    expect((await app.request(`${ORIGIN}/provider`, { headers: { cookie } })).status).toBe(303);
  });

  it("signs out: the old cookie opens nothing afterwards, and signing out needs the CSRF token", async () => {
    const { app } = makeApp();
    const { cookie, csrf } = await session(app);
    expect((await post(app, "/logout", cookie, {})).status).toBe(403);
    const out = await post(app, "/logout", cookie, { _csrf: csrf });
    expect(out.status).toBe(303);
    expect(out.headers.get("location")).toBe("/dashboard/login?signed-out=1");
    expect((await app.request(`${ORIGIN}/provider`, { headers: { cookie } })).status).toBe(303);
  });

  it("keeps providers and the agent operator apart: each session sees only its own views", async () => {
    const { app } = makeApp();
    await createBudgetLedger({ store, clock }).setLimits("researcher", { total: 5_000_000n });
    const provider = await session(app);
    expect((await app.request(`${ORIGIN}/agents`, { headers: { cookie: provider.cookie } })).status).toBe(
      403,
    );
    expect((await signIn(app, "agent", "not-the-token-at-all-0000000")).status).toBe(401);
    const agent = await session(app, "agent", agentToken);
    expect(agent.page).toContain("researcher");
    expect((await app.request(`${ORIGIN}/provider`, { headers: { cookie: agent.cookie } })).status).toBe(403);
    expect(
      (await app.request(`${ORIGIN}/agents/no-such-agent`, { headers: { cookie: agent.cookie } })).status,
    ).toBe(404);
    expect(
      (await app.request(`${ORIGIN}/agents/%3Cscript%3E`, { headers: { cookie: agent.cookie } })).status,
    ).toBe(404);
  });

  it("deprecates only the signed-in provider's own plans: another's is not found and nothing is sent", async () => {
    const scope = { chainId: 31_337, manager: "0x00000000000000000000000000000000000000c0" as const };
    const other = "0x00000000000000000000000000000000000000bb";
    for (const [id, owner] of [
      [41n, other],
      [42n, provider],
    ] as const) {
      await upsertPlan(
        store,
        scope,
        {
          plan_id: id,
          provider: owner,
          token: "0x00000000000000000000000000000000000000d0",
          amount: 1_000_000n,
          interval_seconds: 86_400,
          included_units: 0n,
          overage_unit_price: 0n,
          deprecated: false,
          successor_plan_id: null,
        },
        null,
      );
    }
    const signerCalls: string[] = [];
    const app = createDashboardApp({
      sessionStore: store,
      providerKeys: store,
      sections: [
        providerSection({ store, clock, token }, [
          mountPlanViews({
            store,
            scope,
            token: { ...token, address: "0x00000000000000000000000000000000000000d0" },
            publicClient: {
              waitForTransactionReceipt: () => Promise.reject(new Error("nothing may be sent")),
            },
            planSigner: (p) => {
              signerCalls.push(p);
              return undefined;
            },
          }),
        ]),
      ],
      clock,
      logger: pino({ level: "silent" }),
    });
    const { cookie } = await session(app);
    const plans = await (await app.request(`${ORIGIN}/provider/plans`, { headers: { cookie } })).text();
    expect(plans).toContain('data-plan-row="42"');
    expect(plans).not.toContain('data-plan-row="41"');
    const csrf = /name="_csrf" value="([^"]+)"/.exec(plans)?.[1] ?? "";
    signerCalls.length = 0;
    const foreign = await post(app, "/provider/plans/41/deprecate", cookie, { _csrf: csrf, successor: "" });
    expect(foreign.status).toBe(404);
    const foreignSuccessor = await post(app, "/provider/plans/42/deprecate", cookie, {
      _csrf: csrf,
      successor: "41",
    });
    expect(foreignSuccessor.status).toBe(400);
    const bad = await post(app, "/provider/plans/0x29/deprecate", cookie, { _csrf: csrf });
    expect(bad.status).toBe(400);
    expect(signerCalls).toEqual([]);
  });

  it("answers bad query input with a 400 page, never a 500", async () => {
    const { app } = makeApp();
    const { cookie } = await session(app);
    for (const q of [
      "?bucket=week",
      "?from=yesterday",
      "?from=2026-11-22&to=2026-11-01",
      "?bucket=hour&from=2000-01-01",
    ]) {
      const res = await app.request(`${ORIGIN}/provider${q}`, { headers: { cookie } });
      expect(res.status, q).toBe(400);
      expect(res.headers.get("content-type")).toContain("text/html");
    }
  });
});
