/**
 * `fetchWithPayment` choosing subscriptions: against a small gate that speaks the 402 body and checks
 * sub-auth tokens with the gate's own verifier, with a payer whose subscribe is counted (subscribing
 * itself is covered over a devnet in test/subscriptions.e2e.test.ts).
 */
import { Hono } from "hono";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { beforeEach, describe, expect, it } from "vitest";
import type { FacilitatorClient, FetchFn } from "../http/facilitatorClient.ts";
import { base64UrlEncode } from "../protocol/base64.ts";
import { createFixedClock } from "../protocol/clock.ts";
import type { ErrorCode, GateErrorCode } from "../protocol/errors.ts";
import { isTollgateError, TollgateError } from "../protocol/errors.ts";
import type { SubscriptionStatus } from "../protocol/facilitator.ts";
import type { PaymentOption, PaymentRequired } from "../protocol/paymentRequired.ts";
import { SubscriptionNotActiveError } from "../schemes/subscription/client/subscriptionNotActiveError.ts";
import { createSubAuthVerifier } from "../schemes/subscription/gate/createSubAuthVerifier.ts";
import { createPayer, type Payer } from "./createPayer.ts";
import type { SubscriptionUse } from "./fetchOptions.ts";
import { type FetchPayer, fetchWithPayment } from "./fetchWithPayment.ts";

const FACILITATOR = "http://facilitator.test";
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3" as const;
const MANAGER = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512" as const;
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as const;
const API = "http://api.test";
const START_MS = 1_763_800_000_000;
const SUBSCRIPTION_INFO = {
  planId: "3",
  subscriber: PAY_TO,
  provider: PAY_TO,
  token: TOKEN,
  amount: "9000000",
  interval: 2_592_000,
  createdAt: 1_763_800_000,
  periodStart: 1_763_800_000,
  currentPeriodEnd: 1_766_392_000,
  nextChargeAt: null,
  pausedRemaining: 0,
  maxOverage: "0",
  overageUsed: "0",
  chainTime: 1_763_800_000,
};
const memo = () => `${base64UrlEncode(JSON.stringify({ r: Math.random() }))}.${"A".repeat(43)}`;

function options(resourceOrigin: string, subscriptionScheme = true): PaymentOption[] {
  const common = {
    network: "eip155:31337" as const,
    token: TOKEN,
    payTo: PAY_TO,
    resource: `${resourceOrigin}/report`,
  };
  return [
    {
      ...common,
      scheme: "exact",
      amount: "500000",
      memo: memo(),
      tollgate: { planId: "3", subscriptionScheme, facilitator: FACILITATOR },
    },
    {
      ...common,
      scheme: "subscription",
      amount: "9000000",
      memo: memo(),
      tollgate: {
        planId: "3",
        interval: 2_592_000,
        subscriptionScheme,
        facilitator: FACILITATOR,
        manager: MANAGER,
      },
    },
  ];
}

/** A gate for plan 3 at `audience`: serves subscription 5 with a valid token, unless told to refuse it. */
function fakeGate(clock: ReturnType<typeof createFixedClock>, audience = API, subscriptionScheme = true) {
  const verifier = createSubAuthVerifier({ audience, clock });
  const seen: { sub: string | undefined; payment: boolean }[] = [];
  let refuseWith: GateErrorCode | undefined;
  const app = new Hono();
  const paymentRequired = (error: GateErrorCode, message: string) =>
    new Response(
      JSON.stringify({
        version: "1",
        error,
        message,
        accepts: options(audience, subscriptionScheme),
      } satisfies PaymentRequired),
      {
        status: 402,
        headers: { "content-type": "application/json" },
      },
    );
  app.get("/report", async (c) => {
    const sub = c.req.header("X-Tollgate-Sub");
    seen.push({ sub, payment: c.req.header("X-PAYMENT") !== undefined });
    if (c.req.header("X-PAYMENT") !== undefined) return c.json({ paid: true });
    if (sub !== undefined) {
      const verdict = await verifier.verify(c.req.header("X-Tollgate-Sub-Auth") ?? "", sub);
      if (!verdict.ok) return paymentRequired("SubscriptionAuthInvalid", verdict.reason);
      if (refuseWith !== undefined) return paymentRequired(refuseWith, "refused by the test");
      return c.json({ subscribed: sub });
    }
    return paymentRequired("PaymentRequired", "payment required");
  });
  const fetch: FetchFn = async (input, init) => app.fetch(new Request(input, init));
  return {
    fetch,
    seen,
    refuse(error: GateErrorCode | undefined) {
      refuseWith = error;
    },
  };
}

/**
 * A payer whose subscribe and pay are counted. Its facilitator answers `GET /subscriptions/:id` with
 * `status` when one is given (the state the chain reports), and knows no subscription otherwise.
 */
function payerKit(clock: ReturnType<typeof createFixedClock>, status?: SubscriptionStatus) {
  const facilitator = {
    url: FACILITATOR,
    async request(method: string, path: string, schema: { parse(value: unknown): unknown }) {
      if (status === undefined || method !== "GET" || !path.startsWith("/subscriptions/")) {
        throw new TollgateError("NotFound", "no such subscription");
      }
      return schema.parse({ ...SUBSCRIPTION_INFO, subscriptionId: path.split("/")[2], status });
    },
  } as FacilitatorClient;
  const real = createPayer({
    account: privateKeyToAccount(generatePrivateKey()),
    network: "eip155:31337",
    facilitator,
    clock,
  });
  const calls = { subscribe: 0, pay: 0, subscribeOptions: [] as unknown[] };
  const payer: FetchPayer & Pick<Payer, "subscriptions"> = {
    ...real,
    async subscribe(options) {
      calls.subscribe++;
      calls.subscribeOptions.push(options);
      await new Promise((resolve) => setTimeout(resolve, 5));
      expect(String(options.planId)).toBe("3");
      return 5n;
    },
    async pay(option) {
      calls.pay++;
      return { option, proof: {} as never, header: "paid", settled: undefined };
    },
  };
  return { payer, calls };
}

const subscribeAlways = (all: PaymentOption[]) => all.find((o) => o.scheme === "subscription");

describe("fetchWithPayment with subscription options", () => {
  let clock: ReturnType<typeof createFixedClock>;
  beforeEach(() => {
    clock = createFixedClock(START_MS);
  });

  it("subscribes once when choose picks the plan, retries with the headers, and sends them up front later", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock);
    const uses: SubscriptionUse[] = [];
    const paidFetch = fetchWithPayment(gate.fetch, payer, {
      maxPrice: "1",
      choose: subscribeAlways,
      onSubscribe: (use) => uses.push(use),
    });
    const response = await paidFetch(`${API}/report`);
    expect(await response.json()).toEqual({ subscribed: "5" });
    expect(uses).toEqual([expect.objectContaining({ planId: "3", subscriptionId: 5n, created: true })]);
    expect(gate.seen).toEqual([
      { sub: undefined, payment: false },
      { sub: "5", payment: false },
    ]);
    gate.seen.length = 0;
    for (let i = 0; i < 3; i++) expect((await paidFetch(`${API}/report`)).status).toBe(200);
    expect(gate.seen.every((s) => s.sub === "5")).toBe(true);
    expect(gate.seen).toHaveLength(3);
    expect(calls).toMatchObject({ subscribe: 1, pay: 0 });
  });

  it("refuses a plan run by another facilitator, naming both, having subscribed to nothing", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock);
    const mine = { ...payer.facilitator, url: "http://127.0.0.1:4021" } as FacilitatorClient;
    const paidFetch = fetchWithPayment(
      gate.fetch,
      { ...payer, facilitator: mine },
      { maxPrice: "1", choose: subscribeAlways },
    );
    const error = await paidFetch(`${API}/report`).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({
      code: "InvalidRequest",
      message: `cannot take out the plan: the seller asks for payment on eip155:31337 through the facilitator at ${FACILITATOR}; your facilitator at http://127.0.0.1:4021 is another facilitator, whose proofs the seller does not accept: point the payer at the seller's facilitator (${FACILITATOR})`,
      details: { reason: "other_facilitator", facilitator: FACILITATOR },
    });
    expect(calls).toMatchObject({ subscribe: 0, pay: 0 });
  });

  it("subscribes to a plan once among concurrent calls", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock);
    const paidFetch = fetchWithPayment(gate.fetch, payer, { maxPrice: "1", choose: subscribeAlways });
    const responses = await Promise.all(Array.from({ length: 5 }, () => paidFetch(`${API}/report`)));
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(calls.subscribe).toBe(1);
  });

  it.each(["AllowanceExhausted", "SubscriptionNotActive"] as const)(
    "surfaces a %s refusal as a typed error when choose declines, and pays once when it picks a price",
    async (error) => {
      const gate = fakeGate(clock);
      const { payer, calls } = payerKit(clock);
      const paidFetch = fetchWithPayment(gate.fetch, payer, {
        maxPrice: "1",
        choose: (all, context) => (context.refusal === undefined ? subscribeAlways(all) : undefined),
      });
      expect((await paidFetch(`${API}/report`)).status).toBe(200);
      gate.refuse(error);
      const thrown = await paidFetch(`${API}/report`).catch((e: unknown) => e);
      expect(isTollgateError(thrown, error)).toBe(true);
      expect(calls.pay).toBe(0);

      const refusals: string[] = [];
      const fallback = fetchWithPayment(gate.fetch, payer, {
        maxPrice: "1",
        choose: (_all, context) => {
          if (context.refusal !== undefined) refusals.push(context.refusal.error);
          return context.affordable[0];
        },
      });
      payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
      expect(await (await fallback(`${API}/report`)).json()).toEqual({ paid: true });
      expect(refusals).toEqual([error]);
      expect(calls.pay).toBe(1);
      expect(gate.seen.at(-1)).toEqual({ sub: undefined, payment: true });
    },
  );

  it("signs again for the gate's public origin when its 402 names another audience", async () => {
    const gate = fakeGate(clock, "https://public.api.test");
    const { payer } = payerKit(clock);
    const paidFetch = fetchWithPayment(gate.fetch, payer, { maxPrice: "1", choose: subscribeAlways });
    // The resource URL in the 402 names the public origin: tokens are minted for it from the start.
    expect((await paidFetch(`${API}/report`)).status).toBe(200);
    // A binding with the wrong audience is corrected once from the refusal.
    payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API, audience: API });
    expect((await paidFetch(`${API}/report`)).status).toBe(200);
    expect(payer.subscriptions.forOrigin(API)?.audience).toBe("https://public.api.test");
  });

  it("pays once with the default chooser when the caller did not allow subscribing", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock);
    const paidFetch = fetchWithPayment(gate.fetch, payer, { maxPrice: "1", subscription: { maxOverage: 2 } });
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ paid: true });
    expect(calls).toMatchObject({ subscribe: 0, pay: 1 });
  });
});

describe("the default chooser and subscriptionScheme (§2.1)", () => {
  let clock: ReturnType<typeof createFixedClock>;
  beforeEach(() => {
    clock = createFixedClock(START_MS);
  });

  it("subscribes to the flagged plan when subscription.maxPrice allows it, instead of paying once", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock);
    const uses: SubscriptionUse[] = [];
    const paidFetch = fetchWithPayment(gate.fetch, payer, {
      maxPrice: "1",
      subscription: { maxPrice: "10", maxOverage: 2 },
      onSubscribe: (use) => uses.push(use),
    });
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ subscribed: "5" });
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ subscribed: "5" });
    expect(calls).toMatchObject({ subscribe: 1, pay: 0 });
    expect(uses).toEqual([expect.objectContaining({ planId: "3", created: true })]);
    // The terms go to subscribe as given, with the price ceiling and the offer the plan read from the
    // chain is checked against before anything is signed.
    expect(calls.subscribeOptions).toEqual([
      {
        planId: "3",
        maxOverage: 2,
        maxPrice: 10_000_000n,
        offer: { payTo: PAY_TO, token: TOKEN, amount: "9000000" },
      },
    ]);
  });

  it("pays once when the plan costs more per period than subscription.maxPrice", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock);
    const paidFetch = fetchWithPayment(gate.fetch, payer, {
      maxPrice: "1",
      subscription: { maxPrice: "8.99" },
    });
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ paid: true });
    expect(calls).toMatchObject({ subscribe: 0, pay: 1 });
  });

  it("pays once when the gate does not flag its plan with subscriptionScheme", async () => {
    const gate = fakeGate(clock, API, false);
    const { payer, calls } = payerKit(clock);
    const paidFetch = fetchWithPayment(gate.fetch, payer, {
      maxPrice: "1",
      subscription: { maxPrice: "10" },
    });
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ paid: true });
    expect(calls).toMatchObject({ subscribe: 0, pay: 1 });
  });
});

describe("a subscription the gate says is not active", () => {
  let clock: ReturnType<typeof createFixedClock>;
  beforeEach(() => {
    clock = createFixedClock(START_MS);
  });

  async function inactive(run: Promise<unknown>): Promise<SubscriptionNotActiveError> {
    const error = await run.catch((e: unknown) => e);
    if (error instanceof SubscriptionNotActiveError) return error;
    throw new Error(`expected SubscriptionNotActiveError, got ${String(error)}`);
  }

  it.each(["Paused", "PastDue"] as const)(
    "is a typed error naming the subscription and its state (%s), never a silent one-time payment",
    async (status) => {
      const gate = fakeGate(clock);
      const { payer, calls } = payerKit(clock, status);
      payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
      const paidFetch = fetchWithPayment(gate.fetch, payer, { maxPrice: "1" });
      gate.refuse("SubscriptionNotActive");
      const first = await inactive(paidFetch(`${API}/report`));
      expect(isTollgateError(first, "SubscriptionNotActive")).toBe(true);
      expect(first).toMatchObject({ subscriptionId: 5n, state: status });
      expect(first.details).toMatchObject({ subscriptionId: "5", state: status, url: `${API}/report` });
      // Still bound: the next call says so again instead of paying once.
      expect((await inactive(paidFetch(`${API}/report`))).state).toBe(status);
      expect(calls.pay).toBe(0);
      // Resumed (or renewed): served by the same subscription again, with nothing to re-arrange.
      gate.refuse(undefined);
      expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ subscribed: "5" });
      expect(calls).toMatchObject({ subscribe: 0, pay: 0 });
    },
  );

  it("reports a renewal overdue (Active on chain) and an unknown state when the facilitator cannot say", async () => {
    const gate = fakeGate(clock);
    gate.refuse("SubscriptionNotActive");
    const overdue = payerKit(clock, "Active").payer;
    overdue.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
    const a = await inactive(fetchWithPayment(gate.fetch, overdue, { maxPrice: "1" })(`${API}/report`));
    expect(a.state).toBe("RenewalOverdue");
    const { payer } = payerKit(clock);
    const unknown: FetchPayer = { ...payer, facilitator: { url: FACILITATOR } as FacilitatorClient };
    payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
    const b = await inactive(fetchWithPayment(gate.fetch, unknown, { maxPrice: "1" })(`${API}/report`));
    expect(b.state).toBe("Unknown");
  });

  it("forgets a cancelled subscription after saying so once: the next call meets the gate's terms afresh", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock, "Cancelled");
    payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
    const paidFetch = fetchWithPayment(gate.fetch, payer, { maxPrice: "1" });
    gate.refuse("SubscriptionNotActive");
    expect((await inactive(paidFetch(`${API}/report`))).state).toBe("Cancelled");
    expect(payer.subscriptions.forOrigin(API)).toBeUndefined();
    expect(payer.subscriptions.forPlan("3")).toBeUndefined();
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ paid: true });
    expect(calls.pay).toBe(1);
  });

  it('pays once per call with onSubscriptionInactive: "pay-once", and uses the subscription again once active', async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock, "Paused");
    payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
    const paidFetch = fetchWithPayment(gate.fetch, payer, {
      maxPrice: "1",
      onSubscriptionInactive: "pay-once",
    });
    gate.refuse("SubscriptionNotActive");
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ paid: true });
    expect(gate.seen.slice(-2)).toEqual([
      { sub: "5", payment: false },
      { sub: undefined, payment: true },
    ]);
    expect(calls.pay).toBe(1);
    gate.refuse(undefined);
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ subscribed: "5" });
    expect(calls.pay).toBe(1);
  });

  it('does not pay once above maxPrice with "pay-once"', async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock, "Paused");
    payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
    const paidFetch = fetchWithPayment(gate.fetch, payer, {
      maxPrice: "0.10",
      onSubscriptionInactive: "pay-once",
    });
    gate.refuse("SubscriptionNotActive");
    const error = await paidFetch(`${API}/report`).catch((e: unknown) => e);
    expect(isTollgateError(error, "PriceCeilingExceeded")).toBe(true);
    expect(calls.pay).toBe(0);
  });

  it('throws with onSubscriptionInactive: "error" even when a custom choose would pay once', async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock, "Paused");
    payer.subscriptions.remember({ planId: "3", subscriptionId: 5n, origin: API });
    let asked = 0;
    const paidFetch = fetchWithPayment(gate.fetch, payer, {
      maxPrice: "1",
      onSubscriptionInactive: "error",
      choose: (_all, context) => {
        asked++;
        return context.affordable[0];
      },
    });
    gate.refuse("SubscriptionNotActive");
    expect((await inactive(paidFetch(`${API}/report`))).state).toBe("Paused");
    expect({ asked, pay: calls.pay }).toEqual({ asked: 0, pay: 0 });
  });
});

describe("fetchWithPayment's inputs", () => {
  it.each([
    ["no options", [fetch, "payer"], "InvalidRequest"],
    ["no fetch", [undefined, "payer", { maxPrice: "1" }], "InvalidRequest"],
    ["no payer", [fetch, undefined, { maxPrice: "1" }], "InvalidRequest"],
    ["no maxPrice", [fetch, "payer", {}], "InvalidAmount"],
    ["a number maxPrice", [fetch, "payer", { maxPrice: 1 }], "InvalidAmount"],
    [
      "a NaN maxOverage",
      [fetch, "payer", { maxPrice: "1", subscription: { maxOverage: Number.NaN } }],
      "InvalidAmount",
    ],
    [
      "a float subscription price",
      [fetch, "payer", { maxPrice: "1", subscription: { maxPrice: 9.5 } }],
      "InvalidAmount",
    ],
    [
      "subscription terms that are not an object",
      [fetch, "payer", { maxPrice: "1", subscription: "yes" }],
      "InvalidRequest",
    ],
    [
      "an unknown onSubscriptionInactive",
      [fetch, "payer", { maxPrice: "1", onSubscriptionInactive: "maybe" }],
      "InvalidRequest",
    ],
    [
      "a choose that is not a function",
      [fetch, "payer", { maxPrice: "1", choose: "cheapest" }],
      "InvalidRequest",
    ],
  ])("refuses %s with a typed error at construction", (_name, args, code) => {
    const { payer } = payerKit(createFixedClock(START_MS));
    const [f, p, o] = args as [unknown, unknown, unknown];
    let thrown: unknown;
    try {
      (fetchWithPayment as (...a: unknown[]) => unknown)(f, p === "payer" ? payer : p, o);
    } catch (error) {
      thrown = error;
    }
    expect(isTollgateError(thrown, code as ErrorCode)).toBe(true);
  });
});
