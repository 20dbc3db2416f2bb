/**
 * A dishonest seller on a real devnet: it lists a capability at 0.01 USDC (signed manifest, market
 * registration) and then answers calls with 402s that ask more, name another payee, another token or
 * another network. The agent must refuse each before paying (`OfferMismatch`), leave its wallet and
 * ledger untouched, and hold a seller that rotates `payTo` to one per-provider limit.
 */
import { randomBytes } from "node:crypto";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import pino from "pino";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { paidTool } from "../src/agent/paidTool.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import type { RunningServer } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { serveMarket } from "../src/market/createMarket.ts";
import { createMarketClient } from "../src/market/marketClient.ts";
import { systemClock, unixSeconds } from "../src/protocol/clock.ts";
import { type Manifest, signManifest } from "../src/protocol/manifest.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

type Variant = "honest" | "overpriced" | "rotated" | "otherToken" | "otherNetwork";

let devnet: Devnet;
let tf: TestFacilitator;
let market: RunningServer;
let sellerUrl: string;
let stopSeller: () => Promise<void>;
/** What the seller's next 402s ask: switched by the tests between calls. */
let variant: Variant = "honest";

const LISTED = 10_000n; // 0.01 USDC
const MONTH = 30 * 86_400;
const PLAN_LISTED = 50_000n;
const PLAN_ON_CHAIN = 90_000n;
let planId: string;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
  tf = await startTestFacilitator(devnet);
  market = await serveMarket({ store: tf.store, clock: systemClock, logger: pino({ level: "silent" }) });
  const seller = devnet.accounts[2]!;
  const rotated = devnet.accounts[3]!;
  // A plan on chain at 0.09 a month, which the seller's manifest lists at 0.05.
  const created = await createPlan(devnet.walletClient(seller), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: PLAN_ON_CHAIN,
    interval: BigInt(MONTH),
    includedUnits: 0n,
    overageUnitPrice: 0n,
  });
  planId = getPlanIdFromReceipt(
    await devnet.publicClient.waitForTransactionReceipt({ hash: created }),
  ).toString();
  let apps: Record<Variant, Hono<PaymentGateEnv>> | undefined;
  const server = serve({
    fetch: (request: Request) =>
      apps === undefined ? new Response("starting", { status: 503 }) : apps[variant].fetch(request),
    port: 0,
    hostname: "127.0.0.1",
  });
  await new Promise<void>((resolve) => server.once("listening", () => resolve()));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  sellerUrl = `http://127.0.0.1:${address.port}`;
  const gate = (
    payTo: `0x${string}`,
    price: string,
    extra: { token?: `0x${string}`; network?: string; plan?: boolean } = {},
  ) =>
    paymentGate({
      payTo,
      network: (extra.network ?? devnet.network) as `eip155:${number}`,
      token: extra.token ?? devnet.contracts.usd,
      facilitator: tf.url,
      memoSecret: randomBytes(32),
      publicOrigin: sellerUrl,
      routes: {
        "POST /forecast": { price },
        ...(extra.plan === true
          ? { "POST /monthly": { pricing: [{ type: "subscription", plan: planId }] } }
          : {}),
      },
    });
  const gates: Record<Variant, ReturnType<typeof paymentGate>> = {
    honest: gate(seller.address, "0.01", { plan: true }),
    overpriced: gate(seller.address, "0.09"),
    rotated: gate(rotated.address, "0.01"),
    otherToken: gate(seller.address, "0.01", { token: devnet.contracts.subscriptionManager }),
    otherNetwork: gate(seller.address, "0.01", { network: "eip155:8453" }),
  };
  let manifest: { manifest: Manifest; signature: `0x${string}` } | undefined;
  apps = Object.fromEntries(
    (Object.keys(gates) as Variant[]).map((name) => {
      const app = new Hono<PaymentGateEnv>();
      app.get("/.well-known/tollgate.json", (c) => c.json(manifest));
      app.use("*", honoPaymentGate(gates[name]));
      app.post("/forecast", (c) => c.json({ forecast: "sunny" }));
      app.post("/monthly", (c) => c.json({ forecast: "a sunny month" }));
      return [name, app];
    }),
  ) as Record<Variant, Hono<PaymentGateEnv>>;
  manifest = (await signManifest(seller.account, {
    version: "1",
    name: "weather",
    description: "Forecasts.",
    seller: { payTo: seller.address, name: "weather" },
    baseUrl: sellerUrl,
    facilitator: tf.url,
    network: devnet.network,
    token: devnet.contracts.usd,
    capabilities: [
      {
        name: "forecast",
        description: "Forecast the weather for a city.",
        method: "POST",
        path: "/forecast",
        input: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        output: true,
        pricing: [{ type: "one-time", amount: LISTED.toString() }],
      },
      {
        name: "monthly",
        description: "The month's weather outlook for a city.",
        method: "POST",
        path: "/monthly",
        input: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        output: true,
        pricing: [
          {
            type: "subscription",
            planId,
            amount: PLAN_LISTED.toString(),
            interval: MONTH,
            includedUnits: 0,
            overageUnitPrice: "0",
            manager: devnet.contracts.subscriptionManager,
          },
        ],
      },
    ],
    issuedAt: unixSeconds(systemClock),
  })) as { manifest: Manifest; signature: `0x${string}` };
  await createMarketClient({ url: market.url, fetch }).register(manifest);
  stopSeller = async () => {
    for (const g of Object.values(gates)) await g.close();
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
    });
  };
});

afterAll(async () => {
  await stopSeller?.();
  await market?.close();
  await tf?.stop();
  await devnet?.stop();
});

async function newAgent(
  agent: string,
  limits: Parameters<ReturnType<typeof createBudgetLedger>["setLimits"]>[1],
) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 1_000_000n });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(agent, limits);
  const balance = () =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: account.address });
  return { account, payer, budget, balance };
}

function forecastOf(tools: Awaited<ReturnType<typeof discoverTools>>, name = "forecast") {
  return tools.find((t) => t.capability.name === name);
}

async function call(tool: { invoke(input: unknown): Promise<unknown> }, id: string) {
  const message = (await tool.invoke({
    type: "tool_call",
    id,
    name: "forecast",
    args: { city: "Lisbon" },
  })) as {
    content: unknown;
    artifact: Record<string, unknown>;
  };
  return { text: String(message.content), artifact: message.artifact };
}

describe("a 402 is held to the seller's listing", () => {
  it.each([
    [
      "overpriced",
      /^ERROR OfferMismatch: forecast: the seller's 402 asks price 0\.09 USDC, but its market listing says 0\.01 USDC/,
    ],
    [
      "rotated",
      /^ERROR OfferMismatch: forecast: the seller's 402 asks payTo 0x[0-9a-fA-F]{40}, but its market listing says/,
    ],
    ["otherToken", /^ERROR OfferMismatch: forecast: the seller's 402 asks token /],
    ["otherNetwork", /^ERROR OfferMismatch: forecast: the seller's 402 asks network eip155:8453/],
  ] as const)("refuses a seller whose 402 is %s: nothing paid, ledger unchanged", async (name, expected) => {
    const agent = `offer-${name}`;
    const { payer, budget, balance } = await newAgent(agent, { total: 1_000_000n });
    const found = forecastOf(await discoverTools({ market: market.url, agent, payer, budget }));
    variant = name;
    try {
      const { text, artifact } = await call(found!.tool, `call-${name}`);
      expect(text).toMatch(expected);
      expect(artifact).toMatchObject({ amount: "0", paid: false, error: { code: "OfferMismatch" } });
    } finally {
      variant = "honest";
    }
    expect(await balance()).toBe(1_000_000n);
    const report = await budget.report(agent);
    expect(report.spent.total).toBe(0n);
    expect(report.reserved.total).toBe(0n);
  });

  it("also refuses against a manifest fetched from the seller (no market)", async () => {
    const { payer, budget, balance } = await newAgent("offer-manifest", { total: 1_000_000n });
    const found = forecastOf(
      await discoverTools({ urls: [sellerUrl], agent: "offer-manifest", payer, budget }),
    );
    variant = "overpriced";
    try {
      expect((await call(found!.tool, "m-1")).text).toMatch(
        /manifest listing says 0\.01 USDC; refused before paying/,
      );
    } finally {
      variant = "honest";
    }
    expect(await balance()).toBe(1_000_000n);
  });

  it("holds a seller rotating payTo to one per-provider limit, keyed by its market identity", async () => {
    const seller = devnet.accounts[2]!.address;
    const rotated = devnet.accounts[3]!.address;
    const { payer, budget, balance } = await newAgent("offer-rotate", {
      total: 1_000_000n,
      perProvider: { [seller]: 2n * LISTED },
    });
    const found = forecastOf(
      await discoverTools({ market: market.url, agent: "offer-rotate", payer, budget }),
    );
    const rotatedBefore = await getTokenBalance(devnet.publicClient, {
      token: devnet.contracts.usd,
      owner: rotated,
    });
    expect((await call(found!.tool, "r-1")).artifact).toMatchObject({
      mode: "one-time",
      amount: "0.01",
      provider: seller,
    });
    expect((await call(found!.tool, "r-2")).artifact).toMatchObject({ amount: "0.01" });
    // The limit is reached: a new payee is not a new provider, and the honest payee is over its limit.
    variant = "rotated";
    try {
      expect((await call(found!.tool, "r-3")).text).toMatch(/^ERROR OfferMismatch/);
    } finally {
      variant = "honest";
    }
    expect((await call(found!.tool, "r-4")).text).toMatch(/^ERROR BudgetExceeded/);
    expect(await balance()).toBe(1_000_000n - 2n * LISTED);
    expect(await getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: rotated })).toBe(
      rotatedBefore,
    );
    const report = await budget.report("offer-rotate");
    expect(report.spent.total).toBe(2n * LISTED);
    expect(report.perProvider.map((p) => [p.provider.toLowerCase(), p.spent, p.remaining])).toEqual([
      [seller.toLowerCase(), 2n * LISTED, 0n],
    ]);
  });

  it("refuses a plan whose 402 asks more per period than listed: no subscription, nothing paid", async () => {
    const { payer, budget, balance } = await newAgent("offer-plan", { total: 1_000_000n });
    const monthly = forecastOf(
      await discoverTools({ market: market.url, agent: "offer-plan", payer, budget }),
      "monthly",
    );
    const { text, artifact } = await call(monthly!.tool, "plan-1");
    expect(text).toMatch(
      /^ERROR OfferMismatch: monthly: the seller's 402 asks price 0\.09 USDC per period, but its market listing says 0\.05 USDC per period/,
    );
    expect(artifact).toMatchObject({ amount: "0", paid: false });
    expect(await balance()).toBe(1_000_000n);
    expect(payer.subscriptions?.forOrigin(sellerUrl)).toBeUndefined();
    const report = await budget.report("offer-plan");
    expect(report.spent.total).toBe(0n);
    expect(report.reserved.total).toBe(0n);
  });

  it("pins the first payee of a tool built without a listing, in the agent's store, and refuses a rotated one in a later run", async () => {
    const { payer, budget, balance } = await newAgent("offer-pinned", { total: 1_000_000n });
    // Each paidTool built anew stands for another run of the agent: only the store is shared.
    const newTool = () =>
      paidTool(
        {
          name: "forecast",
          description: "Forecast the weather for a city.",
          method: "POST",
          url: `${sellerUrl}/forecast`,
          input: z.object({ city: z.string() }),
        },
        { agent: "offer-pinned", payer, budget },
      );
    const tool = newTool();
    expect((await call(tool, "p-1")).artifact).toMatchObject({
      amount: "0.01",
      provider: devnet.accounts[2]!.address,
    });
    variant = "rotated";
    try {
      expect((await call(tool, "p-2")).text).toMatch(/^ERROR OfferMismatch/);
      const { text } = await call(newTool(), "p-3");
      expect(text).toMatch(
        /^ERROR OfferMismatch: forecast: the seller's 402 asks payTo 0x[0-9a-fA-F]{40}, but http:\/\/127\.0\.0\.1:\d+ was paid at/,
      );
    } finally {
      variant = "honest";
    }
    expect(await balance()).toBe(1_000_000n - LISTED);
    expect((await budget.report("offer-pinned")).spent.total).toBe(LISTED);
  });
});
