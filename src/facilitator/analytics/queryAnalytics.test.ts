import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { bucketStarts, queryAnalyticsSummary, queryAnalyticsVolume } from "./queryAnalytics.ts";

const provider = "0x00000000000000000000000000000000000000aa";
const other = "0x00000000000000000000000000000000000000bb";
const usd = "0x00000000000000000000000000000000000000d0";
const eur = "0x00000000000000000000000000000000000000e0";
const alice = "0x0000000000000000000000000000000000000a11";
const bob = "0x0000000000000000000000000000000000000b0b";
const carol = "0x00000000000000000000000000000000000ca201";
const at = (iso: string) => new Date(iso);

let store: Store;

async function payment(p: {
  payer: string;
  payTo?: string;
  amount: bigint;
  at: string;
  status?: string;
  token?: string;
}) {
  const status = p.status ?? "settled";
  await store.query(
    `INSERT INTO payments (nonce, network, token, payer, pay_to, amount, memo, scheme, valid_after, valid_before,
       signature, status, settled_at, created_at)
     VALUES ($1, 'eip155:31337', $2, $3, $4, $5, 'memo', 'exact', 0, 1, '0x', $6, $7, $8)`,
    [
      `0x${randomBytes(32).toString("hex")}`,
      p.token ?? usd,
      p.payer,
      p.payTo ?? provider,
      p.amount,
      status,
      status === "settled" ? at(p.at) : null,
      at(p.at),
    ],
  );
}

async function charge(
  type: string,
  c: { subscriber: string; planId: string; amount: bigint; at: string; provider?: string; token?: string },
) {
  await store.query("INSERT INTO events (type, data, created_at) VALUES ($1, $2, $3)", [
    type,
    {
      subscriptionId: "1",
      planId: c.planId,
      // The indexer writes checksummed addresses; analytics compares case-insensitively.
      subscriber: c.subscriber.toUpperCase().replace("0X", "0x"),
      provider: (c.provider ?? provider).toUpperCase().replace("0X", "0x"),
      payTo: c.provider ?? provider,
      token: c.token ?? usd,
      amount: c.amount.toString(),
    },
    at(c.at),
  ]);
}

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  // 2026-11-22, hours 10 to 12 (UTC), plus noise that must not count.
  await payment({ payer: alice, amount: 500_000n, at: "2026-11-22T10:15:00Z" });
  await payment({ payer: alice, amount: 250_000n, at: "2026-11-22T10:59:59.999Z" });
  await payment({ payer: bob, amount: 100_000n, at: "2026-11-22T11:00:00Z" });
  await payment({ payer: carol, amount: 1n, at: "2026-11-22T12:30:00Z", token: eur });
  await charge("subscription.created", {
    subscriber: alice,
    planId: "3",
    amount: 9_000_000n,
    at: "2026-11-22T10:20:00Z",
  });
  await charge("subscription.renewed", {
    subscriber: bob,
    planId: "3",
    amount: 9_000_000n,
    at: "2026-11-22T12:05:00Z",
  });
  await charge("subscription.created", {
    subscriber: carol,
    planId: "12",
    amount: 2_000_000n,
    at: "2026-11-22T12:06:00Z",
  });
  await charge("allowance.deducted", {
    subscriber: alice,
    planId: "3",
    amount: 3_000n,
    at: "2026-11-22T10:30:00Z",
  });
  await charge("allowance.deducted", {
    subscriber: alice,
    planId: "3",
    amount: 2_000n,
    at: "2026-11-22T10:31:00Z",
  });
  // Not revenue of this provider: pending and failed payments, another payee, failed renewals, other events.
  await payment({ payer: bob, amount: 7n, at: "2026-11-22T10:40:00Z", status: "pending" });
  await payment({ payer: bob, amount: 7n, at: "2026-11-22T10:41:00Z", status: "failed" });
  await payment({ payer: bob, amount: 7n, at: "2026-11-22T10:42:00Z", payTo: other });
  await charge("subscription.renewal_failed", {
    subscriber: bob,
    planId: "3",
    amount: 9_000_000n,
    at: "2026-11-22T11:10:00Z",
  });
  await charge("subscription.renewed", {
    subscriber: bob,
    planId: "4",
    amount: 5n,
    at: "2026-11-22T11:11:00Z",
    provider: other,
  });
  await charge("allowance.exhausted", {
    subscriber: alice,
    planId: "3",
    amount: 5n,
    at: "2026-11-22T11:12:00Z",
  });
  // Outside the ranges asked for below.
  await payment({ payer: bob, amount: 42n, at: "2026-11-21T23:59:59Z" });
  await payment({ payer: bob, amount: 43n, at: "2026-11-22T13:00:00Z" });
});

afterAll(async () => {
  await store?.close();
});

const range = { provider, from: at("2026-11-22T00:00:00Z"), to: at("2026-11-22T13:00:00Z") };

describe("queryAnalyticsSummary", () => {
  it("sums exactly the provider's settled payments, subscription charges and metered deductions", async () => {
    const summary = await queryAnalyticsSummary(store, range);
    expect(summary).toEqual({
      volume: String(500_000 + 250_000 + 100_000 + 1 + 9_000_000 * 2 + 2_000_000 + 3_000 + 2_000),
      count: 9,
      uniquePayers: 3,
      schemes: {
        "one-time": { volume: "850001", count: 4, uniquePayers: 3 },
        subscription: { volume: "20000000", count: 3, uniquePayers: 3 },
        metered: { volume: "5000", count: 2, uniquePayers: 1 },
      },
      plans: [
        { planId: "3", volume: "18005000", count: 4, uniquePayers: 2 },
        { planId: "12", volume: "2000000", count: 1, uniquePayers: 1 },
      ],
    });
  });

  it("restricts to one token when asked", async () => {
    const summary = await queryAnalyticsSummary(store, {
      ...range,
      token: eur.toUpperCase().replace("0X", "0x"),
    });
    expect(summary).toMatchObject({ volume: "1", count: 1, uniquePayers: 1, plans: [] });
  });

  it("is all zeros for a provider with no revenue", async () => {
    const summary = await queryAnalyticsSummary(store, {
      ...range,
      provider: "0x00000000000000000000000000000000000000ff",
    });
    expect(summary).toMatchObject({ volume: "0", count: 0, uniquePayers: 0, plans: [] });
    expect(summary.schemes.metered).toEqual({ volume: "0", count: 0, uniquePayers: 0 });
  });

  it("does not count a settled zero-value transfer, nor pending or failed payments, as a charge", async () => {
    const victim = "0x00000000000000000000000000000000000000f2";
    for (let i = 0; i < 5; i++) {
      await payment({ payer: carol, payTo: victim, amount: 0n, at: "2026-11-22T10:00:00Z" });
    }
    await payment({ payer: carol, payTo: victim, amount: 7n, at: "2026-11-22T10:00:00Z", status: "failed" });
    await payment({ payer: carol, payTo: victim, amount: 7n, at: "2026-11-22T10:00:00Z", status: "pending" });
    const summary = await queryAnalyticsSummary(store, { ...range, provider: victim });
    expect(summary).toMatchObject({ volume: "0", count: 0, uniquePayers: 0 });
  });

  it("keeps amounts beyond 2^53 exact", async () => {
    const big = 2n ** 70n + 1n;
    const whale = "0x00000000000000000000000000000000000000f1";
    await payment({ payer: alice, payTo: whale, amount: big, at: "2026-11-22T10:00:00Z" });
    await payment({ payer: bob, payTo: whale, amount: big, at: "2026-11-22T10:00:01Z" });
    const summary = await queryAnalyticsSummary(store, { ...range, provider: whale });
    expect(summary.volume).toBe((2n * big).toString());
  });
});

describe("queryAnalyticsVolume", () => {
  it("buckets by the hour in UTC, edges included in the bucket they start, empty hours included", async () => {
    const buckets = await queryAnalyticsVolume(
      store,
      { provider, from: at("2026-11-22T09:30:00Z"), to: at("2026-11-22T13:00:00Z") },
      "hour",
    );
    expect(buckets.map((b) => [b.start.toISOString(), b.volume, b.count, b.uniquePayers])).toEqual([
      ["2026-11-22T09:00:00.000Z", "0", 0, 0],
      ["2026-11-22T10:00:00.000Z", String(500_000 + 250_000 + 9_000_000 + 5_000), 5, 1],
      ["2026-11-22T11:00:00.000Z", "100000", 1, 1],
      ["2026-11-22T12:00:00.000Z", String(1 + 9_000_000 + 2_000_000), 3, 2],
    ]);
    const ten = buckets[1]!;
    expect(ten.schemes).toEqual({
      "one-time": { volume: "750000", count: 2, uniquePayers: 1 },
      subscription: { volume: "9000000", count: 1, uniquePayers: 1 },
      metered: { volume: "5000", count: 2, uniquePayers: 1 },
    });
    expect(ten.plans).toEqual([{ planId: "3", volume: "9005000", count: 3, uniquePayers: 1 }]);
  });

  it("buckets by the day, counting the whole first day", async () => {
    const buckets = await queryAnalyticsVolume(
      store,
      { provider, from: at("2026-11-21T12:00:00Z"), to: at("2026-11-22T12:00:00Z") },
      "day",
    );
    expect(buckets.map((b) => [b.start.toISOString(), b.volume, b.count])).toEqual([
      ["2026-11-21T00:00:00.000Z", "42", 1],
      ["2026-11-22T00:00:00.000Z", String(850_000 + 9_000_000 + 5_000), 6],
    ]);
  });

  it("lists bucket starts covering a range", () => {
    expect(
      bucketStarts(at("2026-11-22T10:59:00Z"), at("2026-11-22T12:00:00Z"), "hour").map((d) =>
        d.toISOString(),
      ),
    ).toEqual(["2026-11-22T10:00:00.000Z", "2026-11-22T11:00:00.000Z"]);
  });
});
