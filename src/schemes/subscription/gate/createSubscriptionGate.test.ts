/**
 * The gate's subscription and metering paths through `paymentGate`, against an in-process facilitator
 * that speaks the real wire formats (plans, subscriptions, event feed, usage), on a fixed clock.
 */
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { Hono } from "hono";
import { type Address, getAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { beforeEach, describe, expect, it } from "vitest";
import { type GateResult, paymentGate } from "../../../gate/paymentGate.ts";
import type { PaymentGateOptions } from "../../../gate/paymentGateOptions.ts";
import { createFacilitatorClient, type FetchFn } from "../../../http/facilitatorClient.ts";
import { base64UrlEncode } from "../../../protocol/base64.ts";
import { canonicalJson } from "../../../protocol/canonicalJson.ts";
import { createFixedClock, unixSeconds } from "../../../protocol/clock.ts";
import {
  type PaymentRequired,
  PaymentRequiredSchema,
  planTermsOf,
} from "../../../protocol/paymentRequired.ts";
import {
  encodeSubAuthPayload,
  formatSubAuthToken,
  subAuthMessage,
} from "../../../protocol/subscriptionAuth.ts";
import type { FeedEvent, PlanInfo, SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import { createPlanCatalog } from "./createPlanCatalog.ts";
import { createSubscriptionGate } from "./createSubscriptionGate.ts";
import { createMemoryUsageLedger } from "./usage/createMemoryUsageLedger.ts";

const NETWORK = "eip155:31337";
const TOKEN = getAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3");
const MANAGER = getAddress("0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512");
const PAY_TO = getAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
const OTHER_PROVIDER = getAddress("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");
const ORIGIN = "https://api.example.com";
const FACILITATOR = "http://facilitator.test";
const SECRET = "a-test-memo-secret-that-is-at-least-32-bytes-long";
const API_KEY = `tg_${"k".repeat(32)}`;
const START_MS = 1_763_800_000_000;
const DAY = 86_400;

const subscriber = privateKeyToAccount(generatePrivateKey());
const stranger = privateKeyToAccount(generatePrivateKey());

function plan(planId: string, overrides: Partial<PlanInfo> = {}): PlanInfo {
  return {
    planId,
    provider: PAY_TO,
    token: TOKEN,
    amount: "9000000",
    interval: 30 * DAY,
    includedUnits: "0",
    overageUnitPrice: "0",
    deprecated: false,
    successorPlanId: null,
    ...overrides,
  };
}

const PLANS: Record<string, PlanInfo> = {
  "3": plan("3"),
  "4": plan("4", { amount: "5000000", includedUnits: "3", overageUnitPrice: "1000" }),
  "5": plan("5", { provider: OTHER_PROVIDER }),
  "6": plan("6", { includedUnits: "2" }),
  "9": plan("9", { provider: OTHER_PROVIDER }),
};

/** A facilitator's subscription endpoints over mutable state, counting what gates ask. */
function createFakeFacilitator(clock: { now(): number }) {
  const subscriptions = new Map<string, SubscriptionInfo>();
  const events: FeedEvent[] = [];
  const usage: {
    authorization: string | undefined;
    records: { subscriptionId: string; amount: string; ref: string }[];
  }[] = [];
  const hits = new Map<string, number>();
  const outcomes = new Map<string, "settled" | "failed">();
  let down = false;
  const app = new Hono();
  app.use("*", async (c, next) => {
    const key = `${c.req.method} ${c.req.path.replace(/\/\d+$/, "/:id")}`;
    hits.set(key, (hits.get(key) ?? 0) + 1);
    if (down)
      return c.json({ error: { code: "ChainUnavailable", message: "down" } }, 503, { "retry-after": "3" });
    await next();
  });
  app.get("/supported", (c) =>
    c.json({
      version: "1",
      schemes: ["exact", "subscription"],
      networks: [
        {
          network: NETWORK,
          tokens: [
            { address: TOKEN, symbol: "USDC", decimals: 6, eip712: { name: "USD Coin", version: "2" } },
          ],
          subscriptionManager: MANAGER,
        },
      ],
    }),
  );
  app.get("/plans/:id", (c) => {
    const found = PLANS[c.req.param("id")];
    return found === undefined
      ? c.json({ error: { code: "NotFound", message: "no such plan" } }, 404)
      : c.json(found);
  });
  app.get("/subscriptions/:id", (c) => {
    const found = subscriptions.get(c.req.param("id"));
    return found === undefined
      ? c.json({ error: { code: "NotFound", message: "no such subscription" } }, 404)
      : c.json(found);
  });
  // Served in the order recorded; the cursor (`0.<events served>`) is opaque to the gate.
  app.get("/events", (c) => {
    const served = Number((c.req.query("after") ?? "0.0").split(".")[1]);
    const limit = Number(c.req.query("limit") ?? "100");
    const page = events.slice(served, served + limit);
    return c.json({ events: page, next: `0.${served + page.length}` });
  });
  app.post("/usage", async (c) => {
    const body = (await c.req.json()) as (typeof usage)[number];
    usage.push({ authorization: c.req.header("authorization"), records: body.records });
    const accepted = body.records.map((r) => ({
      ...r,
      status: "pending",
      transaction: null,
      failure: null,
      duplicate: false,
    }));
    return c.json({ accepted }, 202);
  });
  const exhaustionReports: { authorization: string | undefined; body: unknown }[] = [];
  app.post("/usage/exhausted", async (c) => {
    exhaustionReports.push({ authorization: c.req.header("authorization"), body: await c.req.json() });
    return c.json({ recorded: exhaustionReports.length === 1 }, 202);
  });
  app.get("/usage", (c) => {
    const refs = (c.req.query("refs") ?? "").split(",");
    const records = usage
      .flatMap((call) => call.records)
      .filter((r) => refs.includes(r.ref))
      .map((r) => ({ ...r, status: outcomes.get(r.ref) ?? "submitted", transaction: null, failure: null }));
    return c.json({ records });
  });
  const fetch: FetchFn = async (input, init) => app.fetch(new Request(input, init));

  let nextId = 1;
  return {
    fetch,
    usage,
    exhaustionReports,
    hits: (key: string) => hits.get(key) ?? 0,
    /** What `GET /usage?refs=` reports for a record from now on. */
    settle(ref: string, outcome: "settled" | "failed") {
      outcomes.set(ref, outcome);
    },
    setDown(value: boolean) {
      down = value;
    },
    subscribe(
      planId: string,
      owner: Address = subscriber.address,
      overrides: Partial<SubscriptionInfo> = {},
    ) {
      const id = String(nextId++);
      const now = unixSeconds(clock);
      const terms = PLANS[planId]!;
      subscriptions.set(id, {
        subscriptionId: id,
        planId,
        subscriber: owner,
        provider: terms.provider,
        token: TOKEN,
        amount: terms.amount,
        interval: terms.interval,
        status: "Active",
        createdAt: now,
        periodStart: now,
        currentPeriodEnd: now + terms.interval,
        nextChargeAt: now + terms.interval,
        pausedRemaining: 0,
        maxOverage: "2000",
        overageUsed: "0",
        chainTime: now,
        ...overrides,
      });
      return id;
    },
    update(id: string, changes: Partial<SubscriptionInfo>, eventType?: string) {
      const current = subscriptions.get(id)!;
      subscriptions.set(id, { ...current, ...changes });
      if (eventType !== undefined)
        this.emit(eventType, { subscriptionId: id, planId: current.planId, provider: PAY_TO });
    },
    emit(type: string, data: Record<string, unknown>) {
      events.push({ id: events.length + 1, type, created: unixSeconds(clock), data });
    },
  };
}

async function token(
  subscriptionId: string,
  options: { signer?: typeof subscriber; aud?: string; iat?: number; lifetime?: number; sub?: string } = {},
  clock: { now(): number },
) {
  const iat = options.iat ?? unixSeconds(clock) - 10;
  const claims = {
    sub: options.sub ?? subscriptionId,
    aud: options.aud ?? ORIGIN,
    iat,
    exp: iat + (options.lifetime ?? 3600),
  };
  // The encoder refuses claims a gate must refuse; a forger writes them by hand.
  const payload =
    claims.exp - claims.iat > 3600 ? base64UrlEncode(canonicalJson(claims)) : encodeSubAuthPayload(claims);
  const signature = await (options.signer ?? subscriber).signMessage({ message: subAuthMessage(payload) });
  return formatSubAuthToken(payload, signature);
}

function setup(overrides: Partial<PaymentGateOptions> = {}) {
  const clock = createFixedClock(START_MS);
  const facilitator = createFakeFacilitator(clock);
  const gate = paymentGate({
    payTo: PAY_TO,
    network: NETWORK,
    token: { address: TOKEN, name: "USD Coin", version: "2" },
    facilitator: FACILITATOR,
    fetch: facilitator.fetch,
    memoSecret: SECRET,
    clock,
    publicOrigin: ORIGIN,
    providerApiKey: API_KEY,
    subscriptionEventPollMs: 0,
    usageFlushIntervalMs: 0,
    routes: {
      "GET /api/report": {
        pricing: [
          { type: "one-time", price: "0.10" },
          { type: "subscription", plan: "3" },
        ],
      },
      "GET /api/search": { pricing: [{ type: "subscription", plan: { planId: "4" } }] },
      "GET /api/bulk": { pricing: [{ type: "subscription", plan: 4n }], units: 2 },
      "GET /api/status": { pricing: [{ type: "subscription", plan: "4" }], units: 0 },
      "GET /api/capped": { pricing: [{ type: "subscription", plan: "6" }] },
      "GET /api/misconfigured": { pricing: [{ type: "subscription", plan: "5" }] },
      "GET /api/once": { price: "0.10" },
    },
    ...overrides,
  });
  const results: GateResult[] = [];
  const app = new Hono();
  app.use("/api/*", async (c, next) => {
    const result = await gate(c.req.raw);
    results.push(result);
    if (result.kind === "respond") return result.response;
    await next();
  });
  app.get("/api/*", (c) => c.json({ ok: true }));
  const subscribed = async (path: string, id: string, tokenOptions: Parameters<typeof token>[1] = {}) =>
    app.request(path, {
      headers: { "X-Tollgate-Sub": id, "X-Tollgate-Sub-Auth": await token(id, tokenOptions, clock) },
    });
  const lastPass = () => {
    const last = results.at(-1);
    if (last?.kind !== "pass") throw new Error("the last request did not pass");
    return last;
  };
  return { clock, facilitator, gate, app, subscribed, lastPass };
}

type Kit = ReturnType<typeof setup>;

async function refusal(response: Response): Promise<PaymentRequired> {
  expect(response.status).toBe(402);
  return PaymentRequiredSchema.parse(await response.json());
}

describe("paymentGate with subscription pricing: the 402", () => {
  it("offers the plan's terms beside the one-time price, and only the one-time price to x402 clients", async () => {
    const kit = setup();
    const response = await kit.app.request("/api/report");
    const body = await refusal(response);
    expect(body.accepts.map((o) => o.scheme)).toEqual(["exact", "subscription"]);
    expect(body.accepts[0]!.tollgate).toEqual({
      planId: "3",
      subscriptionScheme: true,
      facilitator: FACILITATOR,
    });
    expect(body.accepts[1]).toMatchObject({
      scheme: "subscription",
      network: NETWORK,
      token: TOKEN,
      amount: "9000000",
      payTo: PAY_TO,
      tollgate: {
        planId: "3",
        interval: 30 * DAY,
        subscriptionScheme: true,
        facilitator: FACILITATOR,
        manager: MANAGER,
      },
    });
    expect(body.accepts[1]!.tollgate).not.toHaveProperty("overage");
    expect(planTermsOf(body.accepts[1]!)).toMatchObject({
      planId: "3",
      amount: "9000000",
      interval: 30 * DAY,
    });
    const x402 = decodePaymentRequiredHeader(response.headers.get("PAYMENT-REQUIRED") ?? "");
    expect(x402.accepts).toHaveLength(1);
    expect(x402.accepts[0]).toMatchObject({ scheme: "exact", amount: "100000" });
  });

  it("puts a metered plan's overage terms into the option and sends no x402 header without a one-time price", async () => {
    const kit = setup();
    const response = await kit.app.request("/api/search");
    const body = await refusal(response);
    expect(body.accepts).toHaveLength(1);
    expect(body.accepts[0]!.tollgate).toMatchObject({
      planId: "4",
      overage: { unitPrice: "1000", includedUnits: 3 },
    });
    expect(response.headers.get("PAYMENT-REQUIRED")).toBeNull();
  });

  it("reads each plan from the facilitator once", async () => {
    const kit = setup();
    for (let i = 0; i < 3; i++) await kit.app.request("/api/report");
    expect(kit.facilitator.hits("GET /plans/:id")).toBe(1);
  });

  it("refuses with a clear error a plan sold by another provider, and ready() names it", async () => {
    const kit = setup();
    const response = await kit.app.request("/api/misconfigured");
    expect(response.status).toBe(500);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error.message).toMatch(/plan 5 is sold by 0x3C44.*not by this gate's payTo/);
    await expect(kit.gate.ready()).rejects.toThrow(/plan 5 is sold by/);
  });
});

describe("paymentGate with subscription pricing: subscription requests", () => {
  let kit: Kit;
  beforeEach(() => {
    kit = setup();
  });

  it("serves an active subscription with a valid token, with no payment", async () => {
    const id = kit.facilitator.subscribe("3");
    const response = await kit.subscribed("/api/report", id);
    expect(response.status).toBe(200);
    const pass = kit.lastPass();
    expect(pass.paid).toBeUndefined();
    expect(pass.subscription).toEqual({
      subscriptionId: BigInt(id),
      subscriber: subscriber.address,
      planId: "3",
      units: 0,
      unitsUsed: undefined,
      charge: 0n,
      deductAllowance: expect.any(Function),
    });
  });

  it("reads a subscription's state once per TTL, however many requests it serves", async () => {
    const id = kit.facilitator.subscribe("3");
    const auth = await token(id, {}, kit.clock);
    const headers = { "X-Tollgate-Sub": id, "X-Tollgate-Sub-Auth": auth };
    for (let i = 0; i < 5; i++) expect((await kit.app.request("/api/report", { headers })).status).toBe(200);
    expect(kit.facilitator.hits("GET /subscriptions/:id")).toBe(1);
    kit.clock.advance(5_000);
    expect((await kit.app.request("/api/report", { headers })).status).toBe(200);
    expect(kit.facilitator.hits("GET /subscriptions/:id")).toBe(2);
  });

  it("refuses a paused subscription as soon as the facilitator's event is applied, within the TTL", async () => {
    const id = kit.facilitator.subscribe("3");
    expect((await kit.subscribed("/api/report", id)).status).toBe(200);
    kit.facilitator.update(id, { status: "Paused" }, "subscription.paused");
    await kit.gate.syncEvents();
    const body = await refusal(await kit.subscribed("/api/report", id));
    expect(body.error).toBe("SubscriptionNotActive");
    expect(body.message).toMatch(/paused/);
    // The refusal is a full 402: the payer can still pay once.
    expect(body.accepts.map((o) => o.scheme)).toEqual(["exact", "subscription"]);

    kit.facilitator.update(id, { status: "Active" }, "subscription.resumed");
    await kit.gate.syncEvents();
    expect((await kit.subscribed("/api/report", id)).status).toBe(200);
  });

  it.each([
    ["Cancelled", /cancelled/],
    ["PastDue", /past due/],
  ] as const)("refuses a %s subscription with SubscriptionNotActive", async (status, message) => {
    const id = kit.facilitator.subscribe("3", subscriber.address, { status });
    const body = await refusal(await kit.subscribed("/api/report", id));
    expect(body.error).toBe("SubscriptionNotActive");
    expect(body.message).toMatch(message);
  });

  it("refuses an unknown subscription id with SubscriptionNotActive", async () => {
    const body = await refusal(await kit.subscribed("/api/report", "777"));
    expect(body.error).toBe("SubscriptionNotActive");
    expect(body.message).toMatch(/does not exist/);
  });

  it("refuses someone else's subscription id with a token the caller signed itself", async () => {
    const id = kit.facilitator.subscribe("3");
    const body = await refusal(await kit.subscribed("/api/report", id, { signer: stranger }));
    expect(body.error).toBe("SubscriptionAuthInvalid");
    expect(body.message).toMatch(/not signed by subscription .* subscriber/);
  });

  it.each([
    [
      "a token for another gate's origin",
      { aud: "https://other.example.com" },
      /for https:\/\/other\.example\.com/,
    ],
    ["an expired token", { iat: Math.floor(START_MS / 1000) - 3700 }, /expired/],
    ["a token issued in the future", { iat: Math.floor(START_MS / 1000) + 600 }, /future/],
    ["a token for another subscription", { sub: "999" }, /issued for subscription 999/],
    ["a token living longer than an hour", { lifetime: 3601 }, /malformed/],
  ])("refuses %s with SubscriptionAuthInvalid", async (_name, options, message) => {
    const id = kit.facilitator.subscribe("3");
    const body = await refusal(await kit.subscribed("/api/report", id, options));
    expect(body.error).toBe("SubscriptionAuthInvalid");
    expect(body.message).toMatch(message);
  });

  it.each([
    ["no token", { "X-Tollgate-Sub": "1" }, /missing/],
    [
      "a forged token",
      { "X-Tollgate-Sub": "1", "X-Tollgate-Sub-Auth": `e30.0x${"ab".repeat(65)}` },
      /malformed/,
    ],
    ["a non-decimal id", { "X-Tollgate-Sub": "0x01", "X-Tollgate-Sub-Auth": "x" }, /decimal/],
  ])("refuses a request with %s, without asking the facilitator", async (_name, headers, message) => {
    kit.facilitator.subscribe("3");
    const body = await refusal(await kit.app.request("/api/report", { headers }));
    expect(body.error).toBe("SubscriptionAuthInvalid");
    expect(body.message).toMatch(message);
    expect(kit.facilitator.hits("GET /subscriptions/:id")).toBe(0);
  });

  it("refuses a subscription to a plan that is not this route's, or not this gate's, as payment required", async () => {
    const mine = kit.facilitator.subscribe("3");
    const theirs = kit.facilitator.subscribe("9");
    for (const [path, id] of [
      ["/api/search", mine],
      ["/api/report", theirs],
    ] as const) {
      const body = await refusal(await kit.subscribed(path, id));
      expect(body.error).toBe("PaymentRequired");
      expect(body.message).toMatch(/does not cover this resource/);
    }
  });

  it("ignores subscription headers on a route that only sells one-time access", async () => {
    const id = kit.facilitator.subscribe("3");
    const body = await refusal(await kit.subscribed("/api/once", id));
    expect(body.error).toBe("PaymentRequired");
  });

  it("answers 503 with Retry-After when the facilitator cannot say, never a refusal", async () => {
    const id = kit.facilitator.subscribe("3");
    await kit.app.request("/api/report");
    kit.facilitator.setDown(true);
    const response = await kit.subscribed("/api/report", id);
    expect(response.status).toBe(503);
    expect(response.headers.get("retry-after")).toBe("3");
  });

  it("answers 503 with Retry-After, not 500, while the facilitator does not see the plan yet (a restart)", async () => {
    const late = setup({
      routes: { "GET /api/late": { pricing: [{ type: "subscription", plan: "8" }] } },
    });
    // The facilitator's index holds a subscription to plan 8, but its plan read does not find it yet.
    PLANS["8"] = plan("8", { amount: "5000000", includedUnits: "3", overageUnitPrice: "1000" });
    const id = late.facilitator.subscribe("8");
    delete PLANS["8"];
    try {
      for (const response of [await late.app.request("/api/late"), await late.subscribed("/api/late", id)]) {
        expect(response.status).toBe(503);
        expect(response.headers.get("retry-after")).toBe("5");
        const body = (await response.json()) as { error: { code: string; message: string } };
        expect(body.error.code).toBe("ChainUnavailable");
        expect(body.error.message).toMatch(/plan 8 is not visible to the facilitator yet/);
      }
      // A burst within the retry window asks the facilitator once.
      const asked = late.facilitator.hits("GET /plans/:id");
      await late.subscribed("/api/late", id);
      expect(late.facilitator.hits("GET /plans/:id")).toBe(asked);
      // Once the facilitator sees it, the same call is served: nothing was remembered as misconfigured.
      PLANS["8"] = plan("8", { amount: "5000000", includedUnits: "3", overageUnitPrice: "1000" });
      late.clock.advance(2_000);
      expect((await late.subscribed("/api/late", id)).status).toBe(200);
    } finally {
      delete PLANS["8"];
    }
  });
});

describe("paymentGate with subscription pricing: metering", () => {
  let kit: Kit;
  beforeEach(() => {
    kit = setup();
  });

  const charges = async (path: string, id: string, n: number) => {
    const seen: (bigint | string | number)[] = [];
    for (let i = 0; i < n; i++) {
      const response = await kit.subscribed(path, id);
      if (response.status === 200) seen.push(kit.lastPass().subscription!.charge);
      else if (response.status === 429) seen.push(429);
      else seen.push(PaymentRequiredSchema.parse(await response.json()).error);
    }
    return seen;
  };

  it("serves included units free, charges each use past them, and refuses at the cap", async () => {
    const id = kit.facilitator.subscribe("4");
    // 3 included; cap 2 000 at 1 000 per unit: two paid units, then AllowanceExhausted.
    expect(await charges("/api/search", id, 6)).toEqual([0n, 0n, 0n, 1000n, 1000n, "AllowanceExhausted"]);
    const body = await refusal(await kit.subscribed("/api/search", id));
    expect(body.message).toMatch(/overage cap.*raise the cap \(payer\.setMaxOverage\) or upgrade the plan/);
  });

  it("tells the facilitator once per cycle that it refused a call at the cap, however many it refuses", async () => {
    const id = kit.facilitator.subscribe("4");
    expect(await charges("/api/search", id, 8)).toEqual([
      0n,
      0n,
      0n,
      1000n,
      1000n,
      "AllowanceExhausted",
      "AllowanceExhausted",
      "AllowanceExhausted",
    ]);
    // Reported in the background: the refusal never waits for it.
    for (let i = 0; i < 100 && kit.facilitator.exhaustionReports.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(kit.facilitator.exhaustionReports).toEqual([
      { authorization: `Bearer ${API_KEY}`, body: { subscriptionId: id, amount: "1000" } },
    ]);
  });

  it("lets requests through again once the cap is raised on chain", async () => {
    const id = kit.facilitator.subscribe("4");
    await charges("/api/search", id, 6);
    kit.facilitator.update(id, { maxOverage: "3000" });
    kit.clock.advance(1_000);
    expect(await charges("/api/search", id, 2)).toEqual([1000n, "AllowanceExhausted"]);
  });

  it("counts a route's units per use, and none on a route with units 0", async () => {
    const id = kit.facilitator.subscribe("4");
    expect(await charges("/api/status", id, 4)).toEqual([0n, 0n, 0n, 0n]);
    expect(await charges("/api/bulk", id, 2)).toEqual([0n, 1000n]);
    expect(kit.lastPass().subscription).toMatchObject({ units: 2, unitsUsed: 4n });
  });

  it("starts a new cycle at renewal", async () => {
    const id = kit.facilitator.subscribe("4");
    expect(await charges("/api/search", id, 4)).toEqual([0n, 0n, 0n, 1000n]);
    const now = unixSeconds(kit.clock);
    kit.facilitator.update(
      id,
      { periodStart: now + 30 * DAY, currentPeriodEnd: now + 60 * DAY, overageUsed: "0" },
      "subscription.renewed",
    );
    await kit.gate.syncEvents();
    expect(await charges("/api/search", id, 4)).toEqual([0n, 0n, 0n, 1000n]);
  });

  it("treats a plan without an overage price as a hard limit at its included units", async () => {
    const id = kit.facilitator.subscribe("6");
    expect(await charges("/api/capped", id, 3)).toEqual([0n, 0n, "AllowanceExhausted"]);
    const body = await refusal(await kit.subscribed("/api/capped", id));
    expect(body.message).toMatch(/includes.*no overage/);
  });

  it("sends charges to POST /usage with the provider key, one record per subscription, and no charge twice", async () => {
    const a = kit.facilitator.subscribe("4");
    const b = kit.facilitator.subscribe("4");
    await charges("/api/search", a, 5);
    await charges("/api/search", b, 4);
    expect(await kit.gate.flushUsage()).toBe(2);
    expect(kit.facilitator.usage).toHaveLength(1);
    const [sent] = kit.facilitator.usage;
    expect(sent!.authorization).toBe(`Bearer ${API_KEY}`);
    expect(new Map(sent!.records.map((r) => [r.subscriptionId, r.amount]))).toEqual(
      new Map([
        [a, "2000"],
        [b, "1000"],
      ]),
    );
    expect(await kit.gate.flushUsage()).toBe(0);
    expect(kit.facilitator.usage).toHaveLength(1);
  });

  it("refuses charging uses with 429 past maxUnsettledUsage until the facilitator reports them settled", async () => {
    kit = setup({ maxUnsettledUsage: 2_000n });
    const a = kit.facilitator.subscribe("4", subscriber.address, { maxOverage: "10000" });
    expect(await charges("/api/search", a, 5)).toEqual([0n, 0n, 0n, 1000n, 1000n]);
    const busy = await kit.subscribed("/api/search", a);
    expect(busy.status).toBe(429);
    expect(busy.headers.get("retry-after")).not.toBeNull();
    expect(((await busy.json()) as { error: { code: string } }).error.code).toBe("RateLimited");
    // Uses within the included units of another subscription do not add exposure and still pass.
    const b = kit.facilitator.subscribe("4");
    expect(await charges("/api/search", b, 1)).toEqual([0n]);

    await kit.gate.flushUsage();
    const [record] = kit.facilitator.usage.at(-1)!.records;
    kit.facilitator.emit("allowance.deducted", {
      subscriptionId: a,
      usageRef: record!.ref,
      amount: record!.amount,
    });
    await kit.gate.syncEvents();
    expect(await charges("/api/search", a, 1)).toEqual([1000n]);
  });

  it("learns outcomes no event reported by asking the facilitator about charges sent long ago", async () => {
    kit = setup({ maxUnsettledUsage: 1_000n });
    const a = kit.facilitator.subscribe("4", subscriber.address, { maxOverage: "10000" });
    expect(await charges("/api/search", a, 5)).toEqual([0n, 0n, 0n, 1000n, 429]);
    await kit.gate.flushUsage();
    const [record] = kit.facilitator.usage.at(-1)!.records;
    kit.facilitator.settle(record!.ref, "failed");
    // Too recent to look up yet: still exposure.
    await kit.gate.flushUsage();
    expect(await charges("/api/search", a, 1)).toEqual([429]);
    kit.clock.advance(60_000);
    await kit.gate.flushUsage();
    expect(await charges("/api/search", a, 1)).toEqual([1000n]);
  });

  it("answers a metered plan with overage but no providerApiKey as a misconfiguration", async () => {
    kit = setup({ providerApiKey: undefined });
    const id = kit.facilitator.subscribe("4");
    const response = await kit.subscribed("/api/search", id);
    expect(response.status).toBe(500);
    expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(
      /providerApiKey/,
    );
  });
});

describe("paymentGate with subscription pricing: renewals that do not come", () => {
  /**
   * The facilitator now reports chain time `late` seconds past the end of the period the subscription
   * started at `start`; the gate's cached state expires (5 s TTL).
   */
  const lateBy = (kit: Kit, id: string, start: number, late: number) => {
    kit.facilitator.update(id, { chainTime: start + 30 * DAY + late });
    kit.clock.advance(5_000);
  };

  it("serves a subscription whose renewal is due but within the grace period, and refuses it once the renewal is overdue", async () => {
    const kit = setup();
    const id = kit.facilitator.subscribe("3");
    const start = unixSeconds(kit.clock);
    lateBy(kit, id, start, 300);
    expect((await kit.subscribed("/api/report", id)).status).toBe(200);
    lateBy(kit, id, start, 301);
    const body = await refusal(await kit.subscribed("/api/report", id));
    expect(body.error).toBe("SubscriptionNotActive");
    expect(body.message).toMatch(/renewal is overdue/);
    expect(body.accepts.map((o) => o.scheme)).toEqual(["exact", "subscription"]);
  });

  it("judges overdue by the chain time the facilitator reports, not the gate's clock", async () => {
    const kit = setup();
    const id = kit.facilitator.subscribe("3");
    // The gate's clock is far past the period's end; the chain (an idle devnet, say) is not.
    kit.clock.advance(60 * DAY * 1000);
    expect((await kit.subscribed("/api/report", id)).status).toBe(200);
  });

  it("serves it again once the renewal is collected", async () => {
    const kit = setup();
    const id = kit.facilitator.subscribe("3");
    const start = unixSeconds(kit.clock);
    lateBy(kit, id, start, 3_600);
    expect((await refusal(await kit.subscribed("/api/report", id))).error).toBe("SubscriptionNotActive");
    kit.facilitator.update(
      id,
      { periodStart: start + 30 * DAY + 3_600, currentPeriodEnd: start + 60 * DAY + 3_600 },
      "subscription.renewed",
    );
    await kit.gate.syncEvents();
    expect((await kit.subscribed("/api/report", id)).status).toBe(200);
  });

  it("takes its grace period from subscriptionRenewalGraceSeconds", async () => {
    const kit = setup({ subscriptionRenewalGraceSeconds: 0 });
    const id = kit.facilitator.subscribe("3");
    const start = unixSeconds(kit.clock);
    lateBy(kit, id, start, 0);
    expect((await kit.subscribed("/api/report", id)).status).toBe(200);
    lateBy(kit, id, start, 1);
    expect((await refusal(await kit.subscribed("/api/report", id))).message).toMatch(/overdue/);
  });
});

describe("steady use", () => {
  it("answers from its caches without a promise, as the path that reads answers, until something must be read", async () => {
    const clock = createFixedClock(START_MS);
    const facilitator = createFakeFacilitator(clock);
    const client = createFacilitatorClient({ url: FACILITATOR, fetch: facilitator.fetch });
    const gate = createSubscriptionGate({
      facilitator: client,
      plans: createPlanCatalog({ facilitator: client, payTo: PAY_TO, network: NETWORK, token: TOKEN, clock }),
      payTo: PAY_TO,
      audience: ORIGIN,
      clock,
      decimals: 6,
      statusTtlMs: 5_000,
      renewalGraceSeconds: 300,
      eventPollMs: 0,
      // Plan 6: two units included and no overage, so no flusher is needed.
      metering: {
        ledger: createMemoryUsageLedger({ clock }),
        flusher: undefined,
        maxUnsettled: 10n ** 18n,
        retryAfterSeconds: 3,
      },
    });
    const id = facilitator.subscribe("6");
    const request = {
      subscriptionId: id,
      token: await token(id, {}, clock),
      route: { offers: [{ planId: "6" }], units: undefined },
      routeRequest: { method: "GET", path: "/api/capped", url: new URL(`${ORIGIN}/api/capped`) },
    };
    const first = gate.check(request);
    expect(first).toBeInstanceOf(Promise);
    expect(await first).toMatchObject({
      kind: "pass",
      subscription: { subscriptionId: BigInt(id), units: 1, unitsUsed: 1n },
    });
    const second = gate.check(request);
    expect(second).not.toBeInstanceOf(Promise);
    expect(second).toEqual({
      kind: "pass",
      subscription: {
        subscriptionId: BigInt(id),
        subscriber: subscriber.address,
        planId: "6",
        units: 1,
        unitsUsed: 2n,
        charge: 0n,
      },
    });
    // Past the included units the ledger refuses: that answer may read the chain again first.
    expect(await gate.check(request)).toMatchObject({ kind: "refuse", error: "AllowanceExhausted" });

    // A token for another id, a changed state, an expired cache entry: each is read, not assumed.
    expect(await gate.check({ ...request, subscriptionId: "99" })).toMatchObject({
      kind: "refuse",
      error: "SubscriptionAuthInvalid",
    });
    facilitator.update(id, { status: "Paused" });
    gate.invalidate(id);
    const paused = gate.check(request);
    expect(paused).toBeInstanceOf(Promise);
    expect(await paused).toMatchObject({ kind: "refuse", error: "SubscriptionNotActive" });
    expect(gate.check(request)).toMatchObject({ kind: "refuse", error: "SubscriptionNotActive" });
    facilitator.update(id, { status: "Active" });
    clock.advance(5_000);
    const reread = gate.check(request);
    expect(reread).toBeInstanceOf(Promise);
    expect(await reread).toMatchObject({ kind: "refuse", error: "AllowanceExhausted" });
    expect(facilitator.hits("GET /subscriptions/:id")).toBe(3);
    await gate.close();
  });
});
