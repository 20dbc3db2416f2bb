/**
 * The dashboard as a Hono app mounted at `/dashboard` (docs/dashboard.md): sign-in and sign-out,
 * sessions, the security middleware, static assets, and the provider and agent views that are
 * configured. The facilitator mounts it through its dashboard module; `tollgate dashboard` serves it
 * alone with the agent views only.
 *
 * Sign-in: a provider posts its API key, the agent operator posts the dashboard token, both in a form
 * body (never a URL). The login form carries a one-time token that must match a cookie set with the
 * form (login CSRF), and login attempts are rate-limited per client address.
 */
import { randomBytes as nodeRandomBytes } from "node:crypto";
import { type Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import type { Logger } from "pino";
import { csrfField, type NavEntry, type PageFrame, page } from "../../http/dashboardLayout.ts";
import { html } from "../../http/html.ts";
import { bucketKey, clientAddress } from "../../http/rateLimits.ts";
import { authenticating, routeDoc } from "../../http/routeDocs.ts";
import { createTokenBuckets, type TokenBucketRule } from "../../http/tokenBucket.ts";
import { base64UrlEncode } from "../../protocol/base64.ts";
import type { Clock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { Queryable } from "../../store/store.ts";
import { findProviderByApiKey } from "../providers/requireProvider.ts";
import { dashboardAssetResponse, loadDashboardAssets } from "./dashboardAssets.ts";
import { assertCsrf, assertSameOrigin, dashboardHeaders, tokensMatch } from "./dashboardSecurity.ts";
import {
  createDashboardSessions,
  type DashboardSession,
  type DashboardSessionOptions,
} from "./dashboardSessions.ts";

/** Hono variables of the dashboard's signed-in routes. */
export type DashboardEnv = { Variables: { session: DashboardSession; form: Record<string, string> } };

/** A group of views mounted under `/dashboard/<prefix>` for one kind of session. */
export type DashboardSection = {
  kind: DashboardSession["kind"];
  prefix: string;
  nav: readonly NavEntry[];
  mount(app: Hono<DashboardEnv>): void;
};

export type DashboardAppOptions = {
  /** Where sessions are kept (the facilitator's store; the agent store for `tollgate dashboard`). */
  sessionStore: Queryable;
  /** Where provider API keys are looked up; absent when no provider views are served. */
  providerKeys?: Queryable | undefined;
  /** The agent operator's sign-in token; absent when no agent views are served. */
  agentToken?: string | undefined;
  sections: readonly DashboardSection[];
  clock: Clock;
  logger: Logger;
  /** The dashboard's origin as browsers see it (`https://pay.example.com`), behind a proxy. */
  publicOrigin?: string | undefined;
  /** Mark cookies `Secure` (default: when the request came over https). */
  secureCookies?: boolean | undefined;
  sessions?: DashboardSessionOptions | undefined;
  /** Sign-in attempts per client address (default 10 at once, one more every 6 s). */
  loginLimit?: TokenBucketRule | undefined;
  /** Proxies whose `X-Forwarded-For` names the client (as the facilitator's rate limits). */
  trustedProxies?: readonly string[] | undefined;
  randomBytes?: ((size: number) => Uint8Array) | undefined;
};

const SESSION_COOKIE = "tollgate_session";
const LOGIN_COOKIE = "tollgate_login";
const MAX_FORM_BYTES = 16 * 1024;

/** The dashboard's own routes, documented for the facilitator's OpenAPI document (routeDocs.ts). */
const docs = {
  asset: routeDoc({
    summary: "Dashboard: a stylesheet or script",
    response: { media: "text/*" },
    errors: [404],
  }),
  loginPage: routeDoc({ summary: "Dashboard: the sign-in form", response: { media: "text/html" } }),
  login: routeDoc({
    summary:
      "Dashboard: sign in with a provider API key or the agent token; sets the session cookie (303 to the home page)",
    request: "form",
    status: 303,
    errors: [400, 401, 403, 429],
  }),
  logout: routeDoc({
    summary: "Dashboard: sign out (303 to the sign-in form)",
    request: "form",
    status: 303,
  }),
  home: routeDoc({ summary: "Dashboard: the session's home page (303)", status: 303 }),
};

/** What the dashboard's routes share: its options, sessions, the sign-in limit and request helpers. */
type DashboardParts = {
  options: DashboardAppOptions;
  logger: Logger;
  random: (size: number) => Uint8Array;
  sessions: ReturnType<typeof createDashboardSessions>;
  loginBuckets: ReturnType<typeof createTokenBuckets>;
  trusted: ReadonlySet<string>;
  now(): Date;
  /** Whether cookies set on this request are `Secure`. */
  secure(c: Context): boolean;
  /** The home page of a kind of session. */
  homeOf(kind: DashboardSession["kind"]): string;
};

/** Builds the dashboard app; mount it with `app.route("/dashboard", dashboard)`. */
export function createDashboardApp(options: DashboardAppOptions): Hono<DashboardEnv> {
  const { clock, logger } = options;
  if (options.agentToken !== undefined && options.agentToken.length < 24) {
    throw new TypeError("the dashboard's agent token must be at least 24 characters");
  }
  const random = options.randomBytes ?? ((size: number) => new Uint8Array(nodeRandomBytes(size)));
  const sessions = createDashboardSessions(options.sessionStore, {
    ...options.sessions,
    randomBytes: random,
  });
  const assets = loadDashboardAssets();
  const loginBuckets = createTokenBuckets({
    ...(options.loginLimit ?? { capacity: 10, refillPerSecond: 1 / 6 }),
    clock,
  });
  const parts: DashboardParts = {
    options,
    logger,
    random,
    sessions,
    loginBuckets,
    trusted: new Set(options.trustedProxies ?? []),
    now: () => new Date(clock.now()),
    secure: (c) => options.secureCookies ?? new URL(c.req.url).protocol === "https:",
    homeOf: (kind) => `/dashboard/${options.sections.find((s) => s.kind === kind)?.prefix ?? ""}`,
  };
  const app = new Hono<DashboardEnv>();

  app.onError((error, c) => errorPage(error, logger, signedInFrame(c, options.sections)));
  app.use(dashboardHeaders());
  app.use(
    bodyLimit({
      maxSize: MAX_FORM_BYTES,
      onError: () => errorPage(new TollgateError("PayloadTooLarge", "the form is too large"), logger),
    }),
  );

  app.get("/assets/:name", docs.asset, (c) => {
    const asset = assets.get(c.req.param("name"));
    if (asset === undefined) throw new TollgateError("NotFound", "no such file");
    return dashboardAssetResponse(asset, c.req.header("accept-encoding"));
  });
  mountSignIn(app, parts);

  // Everything below needs a live session; every POST also a same-origin request and the CSRF token.
  // Marked, so the OpenAPI document lists the session on every route registered after it (routeDocs.ts).
  app.use("*", requireSession(parts));

  app.get("/", docs.home, (c) => c.redirect(parts.homeOf(c.get("session").kind), 303));
  mountSections(app, options.sections);
  return app;
}

/** `GET /login`, `POST /login` and `POST /logout`. */
function mountSignIn(app: Hono<DashboardEnv>, parts: DashboardParts): void {
  const { options, sessions, now, secure } = parts;
  app.get("/login", docs.loginPage, (c) => {
    // A fresh token per form; the POST must show the same in its body and its cookie.
    const loginToken = base64UrlEncode(parts.random(32));
    setCookie(c, LOGIN_COOKIE, loginToken, {
      path: "/dashboard",
      httpOnly: true,
      sameSite: "Strict",
      secure: secure(c),
      maxAge: 600,
    });
    return c.html(
      loginPage(options, loginToken, c.req.query("signed-out") === "1" ? "Signed out." : undefined),
    );
  });

  app.post("/login", docs.login, async (c) => {
    assertSameOrigin(c, options.publicOrigin);
    const peer = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming
      ?.socket?.remoteAddress;
    const taken = parts.loginBuckets.take(
      bucketKey(clientAddress(peer, c.req.header("x-forwarded-for"), parts.trusted)),
    );
    if (!taken.ok) {
      throw new TollgateError(
        "RateLimited",
        `too many sign-in attempts; retry after ${taken.retryAfterSeconds} s`,
        {
          retryAfter: taken.retryAfterSeconds,
          details: { limit: "dashboard_login" },
        },
      );
    }
    const form = await readForm(c);
    const expected = getCookie(c, LOGIN_COOKIE);
    if (expected === undefined || !tokensMatch(form._csrf, expected)) {
      throw new TollgateError("Forbidden", "the sign-in form expired; reload the page and sign in again", {
        details: { reason: "csrf" },
      });
    }
    deleteCookie(c, LOGIN_COOKIE, { path: "/dashboard" });
    const opened = await openSession(parts, form);
    if (opened === undefined) {
      throw new TollgateError("Unauthorized", "unknown or revoked key; check it and sign in again");
    }
    setCookie(c, SESSION_COOKIE, opened.id, {
      path: "/dashboard",
      httpOnly: true,
      sameSite: "Strict",
      secure: secure(c),
    });
    return c.redirect(parts.homeOf(opened.session.kind), 303);
  });

  app.post("/logout", docs.logout, async (c) => {
    assertSameOrigin(c, options.publicOrigin);
    const id = getCookie(c, SESSION_COOKIE) ?? "";
    const session = await sessions.touch(id, now());
    if (session !== undefined) {
      assertCsrf(await readForm(c), session.csrfToken);
      await sessions.close(id);
    }
    deleteCookie(c, SESSION_COOKIE, { path: "/dashboard" });
    return c.redirect("/dashboard/login?signed-out=1", 303);
  });
}

/** A session for the sign-in form's secret: a provider's API key or the agent token; undefined when neither fits. */
async function openSession(
  parts: DashboardParts,
  form: Record<string, string>,
): Promise<Awaited<ReturnType<DashboardParts["sessions"]["open"]>> | undefined> {
  const { options, sessions, now, logger } = parts;
  const secret = form.secret ?? "";
  if (form.kind === "provider" && options.providerKeys !== undefined) {
    const provider = await findProviderByApiKey(options.providerKeys, secret.trim());
    if (provider === undefined) return undefined;
    const opened = await sessions.open(
      { kind: "provider", provider: provider.address, keyId: provider.keyId },
      now(),
    );
    logger.info({ provider: provider.address, keyId: provider.keyId }, "dashboard sign-in");
    return opened;
  }
  if (form.kind === "agent" && options.agentToken !== undefined) {
    if (!tokensMatch(secret.trim(), options.agentToken)) return undefined;
    const opened = await sessions.open({ kind: "agent" }, now());
    logger.info("dashboard sign-in (agent operator)");
    return opened;
  }
  return undefined;
}

/** The signed-in routes' guard: a live session, and on every POST a same-origin request and its CSRF token. */
function requireSession(parts: DashboardParts) {
  const { options, sessions, now } = parts;
  return authenticating("dashboardSession", async (c: Context<DashboardEnv>, next: () => Promise<void>) => {
    const session = await sessions.touch(getCookie(c, SESSION_COOKIE) ?? "", now());
    if (session === undefined) {
      if (c.req.method === "GET") return c.redirect("/dashboard/login", 303);
      throw new TollgateError("Unauthorized", "sign in first");
    }
    c.set("session", session);
    if (c.req.method !== "GET" && c.req.method !== "HEAD") {
      assertSameOrigin(c, options.publicOrigin);
      const form = await readForm(c);
      assertCsrf(form, session.csrfToken);
      c.set("form", form);
    }
    await next();
  });
}

/** Each section under `/<prefix>`, open only to its kind of session. */
function mountSections(app: Hono<DashboardEnv>, sections: readonly DashboardSection[]): void {
  for (const section of sections) {
    const sub = new Hono<DashboardEnv>();
    sub.use("*", async (c, next) => {
      if (c.get("session").kind !== section.kind) {
        throw new TollgateError(
          "Forbidden",
          `this page is for ${section.kind === "agent" ? "the agent operator" : "providers"}; sign in as one`,
          {
            details: { reason: "wrong_session" },
          },
        );
      }
      await next();
    });
    section.mount(sub);
    app.route(`/${section.prefix}`, sub);
  }
}

/** A url-encoded form body as strings (files and repeated fields are refused). */
async function readForm(c: Context): Promise<Record<string, string>> {
  const type = c.req.header("content-type") ?? "";
  if (!/^application\/x-www-form-urlencoded\b/i.test(type)) {
    throw new TollgateError("InvalidRequest", "send a form (application/x-www-form-urlencoded)");
  }
  const params = new URLSearchParams(await c.req.text());
  const form: Record<string, string> = {};
  for (const [key, value] of params) {
    if (key in form) throw new TollgateError("InvalidRequest", `the field ${key} is repeated`);
    form[key] = value;
  }
  return form;
}

function loginPage(options: DashboardAppOptions, loginToken: string, notice: string | undefined): string {
  const providerForm =
    options.providerKeys === undefined
      ? ""
      : html`<form method="post" action="/dashboard/login" class="panel" id="provider-login">
  <h2>Provider</h2>
  ${csrfField(loginToken)}<input type="hidden" name="kind" value="provider">
  <label for="provider-key">API key</label>
  <input id="provider-key" name="secret" type="password" autocomplete="off" required placeholder="tg_…">
  <p class="muted">The key issued by <code>tollgate provider register</code>. It is sent in this form only.</p>
  <button class="primary" type="submit">Sign in</button>
</form>`;
  const agentForm =
    options.agentToken === undefined
      ? ""
      : html`<form method="post" action="/dashboard/login" class="panel" id="agent-login">
  <h2>Agent operator</h2>
  ${csrfField(loginToken)}<input type="hidden" name="kind" value="agent">
  <label for="agent-token">Dashboard token</label>
  <input id="agent-token" name="secret" type="password" autocomplete="off" required>
  <p class="muted">Printed by <code>tollgate dashboard</code> (or the demo) when it started.</p>
  <button class="primary" type="submit">Sign in</button>
</form>`;
  return page(
    { title: "Sign in", nav: [], notice: notice === undefined ? undefined : { text: notice } },
    html`<div class="login">${providerForm}${agentForm}</div>`,
  );
}

/** A signed-in session's navigation and sign-out form, kept on its error pages; none before sign-in. */
function signedInFrame(c: Context<DashboardEnv>, sections: readonly DashboardSection[]): Partial<PageFrame> {
  const session = c.get("session") as DashboardSession | undefined;
  const nav = session === undefined ? undefined : sections.find((s) => s.kind === session.kind)?.nav;
  if (session === undefined || nav === undefined) return {};
  const who = session.kind === "provider" ? `Provider ${session.provider}` : "Agent operator";
  return { nav, who, csrfToken: session.csrfToken };
}

function errorPage(error: unknown, logger: Logger, signedIn: Partial<PageFrame> = {}): Response {
  const known = error instanceof TollgateError && error.code !== "Internal";
  if (!known) logger.error({ err: error }, "dashboard error");
  const status = known ? error.status : 500;
  const message = known ? error.message : "internal error; it has been logged";
  const headers: Record<string, string> = {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-store",
  };
  if (known && error.retryAfter !== undefined) headers["retry-after"] = String(error.retryAfter);
  const body = page(
    {
      title: status === 401 ? "Not signed in" : "Something went wrong",
      nav: [{ href: "/dashboard/", label: "Back to the dashboard" }],
      ...signedIn,
      notice: { text: message, error: true },
    },
    html`<p><a href="/dashboard/login">Sign in</a> · <a href="/dashboard/">Dashboard</a></p>
<p class="muted">Code: <code>${known ? error.code : "Internal"}</code></p>`,
  );
  return new Response(body, { status, headers });
}
