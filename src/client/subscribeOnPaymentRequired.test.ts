/**
 * `fetchWithPayment` choosing subscriptions: against a small gate that speaks the 402 body and checks
 * sub-auth tokens with the gate's own verifier, with a payer whose subscribe is counted (subscribing
 * itself is covered over a devnet in test/subscriptions.e2e.test.ts).
 */
import { Hono } from "hono";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { beforeEach, describe, expect, it } from "vitest";
import { createSubAuthVerifier } from "../gate/subscriptions/createSubAuthVerifier.ts";
import { base64UrlEncode } from "../protocol/base64.ts";
import { createFixedClock } from "../protocol/clock.ts";
import type { GateErrorCode } from "../protocol/errors.ts";
import { isTollgateError } from "../protocol/errors.ts";
import type { PaymentOption, PaymentRequired } from "../protocol/paymentRequired.ts";
import { createPayer, type Payer } from "./createPayer.ts";
import type { FacilitatorClient, FetchFn } from "./facilitatorClient.ts";
import { type FetchPayer, fetchWithPayment, type SubscriptionUse } from "./fetchWithPayment.ts";

const FACILITATOR = "http://facilitator.test";
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3" as const;
const MANAGER = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512" as const;
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as const;
const API = "http://api.test";
const START_MS = 1_763_800_000_000;
const memo = () => `${base64UrlEncode(JSON.stringify({ r: Math.random() }))}.${"A".repeat(43)}`;

function options(resourceOrigin: string): PaymentOption[] {
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
      tollgate: { planId: "3", subscriptionScheme: true, facilitator: FACILITATOR },
    },
    {
      ...common,
      scheme: "subscription",
      amount: "9000000",
      memo: memo(),
      tollgate: {
        planId: "3",
        interval: 2_592_000,
        subscriptionScheme: true,
        facilitator: FACILITATOR,
        manager: MANAGER,
      },
    },
  ];
}

/** A gate for plan 3 at `audience`: serves subscription 5 with a valid token, unless told to refuse it. */
function fakeGate(clock: ReturnType<typeof createFixedClock>, audience = API) {
  const verifier = createSubAuthVerifier({ audience, clock });
  const seen: { sub: string | undefined; payment: boolean }[] = [];
  let refuseWith: GateErrorCode | undefined;
  const app = new Hono();
  const paymentRequired = (error: GateErrorCode, message: string) =>
    new Response(
      JSON.stringify({ version: "1", error, message, accepts: options(audience) } satisfies PaymentRequired),
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

function payerKit(clock: ReturnType<typeof createFixedClock>) {
  const real = createPayer({
    account: privateKeyToAccount(generatePrivateKey()),
    network: "eip155:31337",
    facilitator: { url: FACILITATOR } as FacilitatorClient,
    clock,
  });
  const calls = { subscribe: 0, pay: 0 };
  const payer: FetchPayer & Pick<Payer, "subscriptions"> = {
    ...real,
    async subscribe(options) {
      calls.subscribe++;
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
    expect(calls).toEqual({ subscribe: 1, pay: 0 });
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

  it("never subscribes with the default chooser", async () => {
    const gate = fakeGate(clock);
    const { payer, calls } = payerKit(clock);
    const paidFetch = fetchWithPayment(gate.fetch, payer, { maxPrice: "1" });
    expect(await (await paidFetch(`${API}/report`)).json()).toEqual({ paid: true });
    expect(calls).toEqual({ subscribe: 0, pay: 1 });
  });
});
