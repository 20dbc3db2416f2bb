/**
 * Analytics over a real facilitator (docs/analytics.md): one-time payments settled on a devnet plus
 * subscription charges and metered deductions in the event log; the endpoints' sums must equal the
 * charges exactly, bucketed by the hour and day they were recorded, and each provider sees only its own.
 * Last, a real gasless subscription on chain, indexed by the facilitator, shows in the analytics and
 * reaches the provider's webhook.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { getAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { analyticsCommand } from "../src/cli/commands/analytics.ts";
import {
  AnalyticsSummaryResponseSchema,
  AnalyticsVolumeResponseSchema,
} from "../src/facilitator/analytics/analyticsApi.ts";
import { CreateWebhookResponseSchema } from "../src/facilitator/webhooks/webhookApi.ts";
import { verifyWebhook } from "../src/gate/verifyWebhook.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { formatUnitsExact } from "../src/protocol/amount.ts";
import { systemClock } from "../src/protocol/clock.ts";
import type { WebhookEvent } from "../src/protocol/webhook.ts";
import { subscribeThroughFacilitator } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let provider: DevnetAccount;
let otherProvider: DevnetAccount;
let keyOfProvider: string;
let keyOfOther: string;
let started: Date;

/** Every charge the test made to `provider`: amount, payer, scheme and plan. */
const charges: {
  amount: bigint;
  payer: string;
  scheme: "one-time" | "subscription" | "metered";
  planId?: string;
}[] = [];

async function call(path: string, apiKey?: string) {
  const response = await fetch(`${tf.url}${path}`, {
    headers: apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` },
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function registerProvider(account: DevnetAccount): Promise<string> {
  const post = async (path: string, body: unknown) =>
    (await (
      await fetch(`${tf.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      })
    ).json()) as Record<string, string>;
  const { challenge } = await post("/providers/challenge", { address: account.address });
  const signature = await account.account.signMessage({ message: challenge! });
  return (await post("/providers", { address: account.address, challenge, signature })).apiKey!;
}

async function pay(payer: DevnetAccount, payTo: DevnetAccount, amount: bigint) {
  const signedPayment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount });
  const response = await fetch(`${tf.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
  expect(response.status).toBe(200);
  if (payTo === provider) charges.push({ amount, payer: payer.address.toLowerCase(), scheme: "one-time" });
}

/** A subscription or allowance charge as the subscription indexer records it in the event log. */
async function recordCharge(
  type: "subscription.created" | "subscription.renewed" | "allowance.deducted",
  subscriber: DevnetAccount,
  planId: string,
  amount: bigint,
) {
  await tf.facilitator.context.recordEvent(tf.store, type, {
    subscriptionId: "1",
    planId,
    subscriber: getAddress(subscriber.address),
    provider: getAddress(provider.address),
    payTo: getAddress(provider.address),
    token: getAddress(devnet.contracts.usd),
    amount: amount.toString(),
  });
  charges.push({
    amount,
    payer: subscriber.address.toLowerCase(),
    scheme: type === "allowance.deducted" ? "metered" : "subscription",
    planId,
  });
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 7 });
  tf = await startTestFacilitator(devnet);
  provider = devnet.accounts[2]!;
  otherProvider = devnet.accounts[4]!;
  keyOfProvider = await registerProvider(provider);
  keyOfOther = await registerProvider(otherProvider);
  started = new Date();
  const [a, b] = [devnet.accounts[1]!, devnet.accounts[3]!];
  await pay(a, provider, 100_000n);
  await pay(a, provider, 250_000n);
  await pay(b, provider, 75_000n);
  await pay(a, otherProvider, 999n);
  await recordCharge("subscription.created", b, "101", 9_000_000n);
  await recordCharge("subscription.renewed", b, "101", 9_000_000n);
  await recordCharge("allowance.deducted", b, "101", 1_500n);
  await recordCharge("subscription.created", a, "102", 4_000_000n);
});

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

const sum = (xs: { amount: bigint }[]) => xs.reduce((total, c) => total + c.amount, 0n).toString();
const payers = (xs: { payer: string }[]) => new Set(xs.map((c) => c.payer)).size;

function window() {
  const from = new Date(started.getTime() - 3_600_000).toISOString();
  const to = new Date(Date.now() + 3_600_000).toISOString();
  return { from, to };
}

describe("GET /analytics/summary", () => {
  it("equals the test's charges exactly, by scheme and by plan", async () => {
    const { from, to } = window();
    const response = await call(`/analytics/summary?from=${from}&to=${to}`, keyOfProvider);
    expect(response.status).toBe(200);
    const summary = AnalyticsSummaryResponseSchema.parse(response.body);
    expect(summary.provider).toBe(provider.address);
    expect(summary).toMatchObject({
      volume: sum(charges),
      count: charges.length,
      uniquePayers: payers(charges),
    });
    for (const scheme of ["one-time", "subscription", "metered"] as const) {
      const of = charges.filter((c) => c.scheme === scheme);
      expect(summary.schemes[scheme]).toEqual({
        volume: sum(of),
        count: of.length,
        uniquePayers: payers(of),
      });
    }
    expect(summary.plans).toEqual(
      ["101", "102"].map((planId) => {
        const of = charges.filter((c) => c.planId === planId);
        return { planId, volume: sum(of), count: of.length, uniquePayers: payers(of) };
      }),
    );
    expect(summary.volume).toBe("22426500");
  });

  it("shows each provider only its own revenue", async () => {
    const response = await call("/analytics/summary", keyOfOther);
    const summary = AnalyticsSummaryResponseSchema.parse(response.body);
    expect(summary).toMatchObject({
      provider: otherProvider.address,
      volume: "999",
      count: 1,
      uniquePayers: 1,
    });
    expect(summary.plans).toEqual([]);
  });
});

describe("GET /analytics/volume", () => {
  it.each(["hour", "day"] as const)("puts each charge in the %s it was recorded in", async (bucket) => {
    const { from, to } = window();
    const response = await call(`/analytics/volume?bucket=${bucket}&from=${from}&to=${to}`, keyOfProvider);
    expect(response.status).toBe(200);
    const volume = AnalyticsVolumeResponseSchema.parse(response.body);

    // The expected buckets, computed here from the store's own record times.
    const recorded = await tf.store.query<{ at: Date; amount: string }>(
      `SELECT settled_at AS at, amount::text AS amount FROM payments WHERE pay_to = $1 AND status = 'settled'
       UNION ALL
       SELECT created_at, data ->> 'amount' FROM events
       WHERE type IN ('subscription.created', 'subscription.renewed', 'allowance.deducted')
         AND lower(data ->> 'provider') = $1`,
      [provider.address.toLowerCase()],
    );
    expect(recorded).toHaveLength(charges.length);
    const size = bucket === "hour" ? 3_600_000 : 86_400_000;
    const expected = new Map<string, { volume: bigint; count: number }>();
    for (const r of recorded) {
      const start = new Date(Math.floor(new Date(r.at).getTime() / size) * size).toISOString();
      const entry = expected.get(start) ?? { volume: 0n, count: 0 };
      entry.volume += BigInt(r.amount);
      entry.count++;
      expected.set(start, entry);
    }
    for (const b of volume.buckets) {
      const want = expected.get(b.start) ?? { volume: 0n, count: 0 };
      expect({ start: b.start, volume: b.volume, count: b.count }).toEqual({
        start: b.start,
        volume: want.volume.toString(),
        count: want.count,
      });
    }
    expect(volume.buckets.reduce((total, b) => total + BigInt(b.volume), 0n).toString()).toBe(sum(charges));
    // Buckets are contiguous and cover the range.
    const starts = volume.buckets.map((b) => Date.parse(b.start));
    expect(starts.slice(1).every((s, i) => s - starts[i]! === size)).toBe(true);
    expect(starts[0]).toBe(Date.parse(volume.from));
  });

  it("defaults to the last 30 days by day", async () => {
    const volume = AnalyticsVolumeResponseSchema.parse((await call("/analytics/volume", keyOfProvider)).body);
    expect(volume.bucket).toBe("day");
    expect(volume.buckets.length).toBeGreaterThanOrEqual(30);
    expect(volume.buckets.length).toBeLessThanOrEqual(31);
    expect(volume.buckets.reduce((total, b) => total + BigInt(b.volume), 0n).toString()).toBe(sum(charges));
  });

  it.each([
    ["no API key", 401, "/analytics/volume", undefined],
    ["an unknown bucket", 400, "/analytics/volume?bucket=week", "key"],
    ["a malformed time", 400, "/analytics/volume?from=yesterday", "key"],
    ["an impossible date", 400, "/analytics/summary?from=2026-02-30T00:00:00Z", "key"],
    ["from after to", 400, "/analytics/summary?from=2026-11-22&to=2026-11-21", "key"],
    ["too many buckets", 400, "/analytics/volume?bucket=hour&from=2020-01-01&to=2026-01-01", "key"],
    ["a malformed token", 400, "/analytics/summary?token=0x12", "key"],
  ])("answers %s with %i", async (_, status, path, key) => {
    const response = await call(path, key === undefined ? undefined : keyOfProvider);
    expect(response.status).toBe(status);
  });
});

describe("tollgate analytics", () => {
  it("prints the provider's buckets and totals in USDC", async () => {
    const out: string[] = [];
    const { from, to } = window();
    const code = await analyticsCommand(["--bucket", "hour", "--from", from, "--to", to], {
      env: { TOLLGATE_FACILITATOR_URL: tf.url, TOLLGATE_API_KEY: keyOfProvider },
      out: { log: (line) => out.push(line), error: (line) => out.push(line) },
      fetch,
    });
    expect(code).toBe(0);
    const text = out.join("\n");
    expect(text).toContain(provider.address);
    const total = out.find((line) => line.startsWith("total"))!;
    expect(total.split(/\s+/)).toEqual([
      "total",
      formatUnitsExact(BigInt(sum(charges))),
      String(charges.length),
      "2",
      "0.425",
      "22",
      "0.0015",
    ]);
    expect(out.some((line) => /^plan 101\s+18\.0015\s+3\s+1$/.test(line))).toBe(true);
  });

  it("prints JSON with --json and refuses to run without an API key", async () => {
    const out: string[] = [];
    const deps = {
      env: { TOLLGATE_FACILITATOR_URL: tf.url },
      out: { log: (line: string) => out.push(line), error: (line: string) => out.push(line) },
      fetch,
    };
    expect(await analyticsCommand(["--json", "--api-key", keyOfOther], deps)).toBe(0);
    const parsed = JSON.parse(out.join("\n")) as { summary: unknown };
    expect(AnalyticsSummaryResponseSchema.parse(parsed.summary).volume).toBe("999");
    await expect(analyticsCommand([], deps)).rejects.toMatchObject({ code: "Unauthorized" });
  });
});

describe("a real subscription, end to end", () => {
  it("counts an indexed gasless subscription in the analytics and delivers its event to the provider's webhook", async () => {
    // The provider's receiver, registered for subscription events only.
    const received: WebhookEvent[] = [];
    const secret: { value?: string } = {};
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        received.push(
          verifyWebhook(secret.value!, req.headers, Buffer.concat(chunks), { clock: systemClock }),
        );
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
      const response = await fetch(`${tf.url}/webhooks`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${keyOfProvider}` },
        body: JSON.stringify({ url, events: ["subscription.created"] }),
      });
      secret.value = CreateWebhookResponseSchema.parse(await response.json()).secret;

      const before = AnalyticsSummaryResponseSchema.parse(
        (await call("/analytics/summary", keyOfProvider)).body,
      );
      const hash = await createPlan(devnet.walletClient(provider), {
        manager: devnet.contracts.subscriptionManager,
        token: devnet.contracts.usd,
        amount: 7_000_000n,
        interval: 30n * 86_400n,
        includedUnits: 100n,
        overageUnitPrice: 1_000n,
      });
      const planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
      const subscriber = privateKeyToAccount(generatePrivateKey());
      await devnet.fund(subscriber.address, { usd: 10_000_000n });
      const client = createFacilitatorClient({ url: tf.url, fetch });
      await subscribeThroughFacilitator(client, subscriber, { planId, maxOverage: 0n });

      // The indexer follows the chain in the background; wait for the charge to show.
      let after = before;
      for (
        let i = 0;
        i < 200 && after.schemes.subscription.count === before.schemes.subscription.count;
        i++
      ) {
        await new Promise((r) => setTimeout(r, 100));
        after = AnalyticsSummaryResponseSchema.parse((await call("/analytics/summary", keyOfProvider)).body);
      }
      expect(after.schemes.subscription).toEqual({
        volume: (BigInt(before.schemes.subscription.volume) + 7_000_000n).toString(),
        count: before.schemes.subscription.count + 1,
        uniquePayers: before.schemes.subscription.uniquePayers + 1,
      });
      expect(after.plans.find((p) => p.planId === planId.toString())).toEqual({
        planId: planId.toString(),
        volume: "7000000",
        count: 1,
        uniquePayers: 1,
      });

      for (let i = 0; i < 200 && received.length === 0; i++) await new Promise((r) => setTimeout(r, 100));
      expect(received).toHaveLength(1);
      expect(received[0]).toMatchObject({
        type: "subscription.created",
        data: { planId: planId.toString(), subscriber: subscriber.address, amount: "7000000" },
      });
    } finally {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    }
  });
});
