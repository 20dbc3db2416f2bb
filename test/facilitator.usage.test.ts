/**
 * Metered usage through a real facilitator on a real devnet: providers register for an API key,
 * record deductions with POST /usage, and the settler moves them on chain in batches with per-record
 * outcomes, crash-safely.
 */
import type { Address, Hash } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../src/http/facilitatorClient.ts";
import {
  EventFeedResponseSchema,
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
  type UsageRecord,
  UsageRecordsResponseSchema,
  UsageResponseSchema,
  UsageSummarySchema,
} from "../src/protocol/subscriptions.ts";
import { subscribeThroughFacilitator } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { recordUsage } from "../src/schemes/subscription/facilitator/usage/usageRecords.ts";
import { createUsageSettler } from "../src/schemes/subscription/facilitator/usage/usageSettler.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let client: FacilitatorClient;
let provider: DevnetAccount;
let apiKey: string;
let planId: bigint;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
  tf = await startTestFacilitator(devnet);
  client = createFacilitatorClient({ url: tf.url, fetch });
  provider = devnet.accounts[1]!;
  apiKey = await registerProvider(provider);
  const hash = await createPlan(devnet.walletClient(provider), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: 1_000_000n,
    interval: 30n * 86_400n,
    includedUnits: 100n,
    overageUnitPrice: 1_000n,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
});

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${tf.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

async function registerProvider(account: DevnetAccount): Promise<string> {
  const challenge = ProviderChallengeResponseSchema.parse(
    await (await post("/providers/challenge", { address: account.address })).json(),
  );
  const signature = await account.account.signMessage({ message: challenge.challenge });
  const response = await post("/providers", {
    address: account.address,
    challenge: challenge.challenge,
    signature,
  });
  expect(response.status).toBe(201);
  return ProviderRegisterResponseSchema.parse(await response.json()).apiKey;
}

const auth = (key = apiKey) => ({ authorization: `Bearer ${key}` });

function postUsage(records: unknown[], key = apiKey) {
  return post("/usage", { records }, auth(key));
}

async function errorOf(response: Response) {
  const body = (await response.json()) as { error: { code: string; details?: Record<string, unknown> } };
  return { status: response.status, ...body.error };
}

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function subscriber(maxOverage: bigint) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 10_000_000n });
  const { subscriptionId } = await subscribeThroughFacilitator(client, account, {
    planId,
    maxOverage,
    approval: 10_000_000n,
  });
  return { account, subscriptionId };
}

async function records(refs: string[]): Promise<UsageRecord[]> {
  const response = await fetch(`${tf.url}/usage?refs=${refs.map(encodeURIComponent).join(",")}`, {
    headers: auth(),
  });
  expect(response.status).toBe(200);
  return UsageRecordsResponseSchema.parse(await response.json()).records;
}

/** Waits until every record has an outcome (the settler lingers up to 500 ms, then sends). */
async function settled(refs: string[]): Promise<UsageRecord[]> {
  for (let i = 0; i < 200; i++) {
    const found: UsageRecord[] = [];
    for (let at = 0; at < refs.length; at += 100) found.push(...(await records(refs.slice(at, at + 100))));
    if (found.length === refs.length && found.every((r) => r.status === "settled" || r.status === "failed")) {
      return found;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("records did not settle");
}

async function events(type: string) {
  const response = await fetch(`${tf.url}/events?types=${type}&provider=${provider.address}&limit=1000`, {
    headers: auth(),
  });
  return EventFeedResponseSchema.parse(await response.json()).events;
}

/**
 * The events of `type` whose usageRef passes `match`, once there are `count` of them: the indexer
 * writes them from the chain's logs just after the settler records the outcomes.
 */
async function eventsFor(type: string, match: (usageRef: string) => boolean, count: number) {
  for (let i = 0; i < 100; i++) {
    const found = (await events(type)).filter((e) => match(String(e.data.usageRef)));
    if (found.length >= count) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`fewer than ${count} ${type} events`);
}

async function makeOperator(): Promise<void> {
  const signer = tf.facilitator.supported.networks[0]?.signers?.[0];
  if (signer === undefined) throw new Error("/supported lists no signer");
  const hash = await setOperator(devnet.walletClient(provider), {
    manager: devnet.contracts.subscriptionManager,
    operator: signer,
    allowed: true,
  });
  await devnet.publicClient.waitForTransactionReceipt({ hash });
}

describe("POST /usage", () => {
  it("refuses usage until the provider makes the facilitator its operator", async () => {
    const { subscriptionId } = await subscriber(1_000_000n);
    const response = await postUsage([{ subscriptionId, amount: "1000", ref: "early-1" }]);
    const error = await errorOf(response);
    expect(error.status).toBe(400);
    expect(error.code).toBe("InvalidRequest");
    expect(error.details).toMatchObject({
      reason: "facilitator_not_operator",
      operator: tf.facilitator.context.gas.address,
    });
    await makeOperator();
    expect((await postUsage([{ subscriptionId, amount: "1000", ref: "early-1" }])).status).toBe(202);
    await settled(["early-1"]);
  });

  it("settles 50 records in far fewer transactions, moving exactly the recorded amounts", async () => {
    await makeOperator();
    // One at a time: devnet.fund mints from the deployer, whose nonces must not race.
    const subs: Awaited<ReturnType<typeof subscriber>>[] = [];
    for (let i = 0; i < 5; i++) subs.push(await subscriber(1_000_000n));
    const before = new Map<string, bigint>();
    for (const s of subs) before.set(s.subscriptionId, await balanceOf(s.account.address));
    const providerBefore = await balanceOf(provider.address);

    const all = Array.from({ length: 50 }, (_, i) => ({
      subscriptionId: subs[i % 5]!.subscriptionId,
      amount: String(1_000 + i),
      ref: `bulk-${i}`,
    }));
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, r) => postUsage(all.slice(r * 5, r * 5 + 5))),
    );
    for (const response of responses) {
      expect(response.status).toBe(202);
      const body = UsageResponseSchema.parse(await response.json());
      expect(
        body.accepted.every((a) => !a.duplicate && (a.status === "pending" || a.status === "submitted")),
      ).toBe(true);
    }

    const outcome = await settled(all.map((r) => r.ref));
    expect(outcome.every((r) => r.status === "settled")).toBe(true);
    const transactions = new Set(outcome.map((r) => r.transaction as Hash));
    expect(transactions.size).toBeLessThanOrEqual(5);

    let total = 0n;
    for (const s of subs) {
      const mine = all
        .filter((r) => r.subscriptionId === s.subscriptionId)
        .reduce((n, r) => n + BigInt(r.amount), 0n);
      total += mine;
      expect(await balanceOf(s.account.address)).toBe((before.get(s.subscriptionId) ?? 0n) - mine);
      const summary = UsageSummarySchema.parse(
        await (await fetch(`${tf.url}/usage?subscriptionId=${s.subscriptionId}`, { headers: auth() })).json(),
      );
      expect(summary).toMatchObject({
        overageUsed: mine.toString(),
        settled: { count: 10, amount: mine.toString() },
        unsettled: { count: 0, amount: "0" },
        failed: { count: 0, amount: "0" },
      });
    }
    expect(await balanceOf(provider.address)).toBe(providerBefore + total);

    // The indexer turned each on-chain deduction into allowance.deducted, with the provider's own ref.
    const bulk = await eventsFor("allowance.deducted", (ref) => ref.startsWith("bulk-"), 50);
    expect(bulk).toHaveLength(50);
    expect(bulk[0]?.data).toMatchObject({ provider: provider.address });
  });

  it("fails a record past the cap as AllowanceExhausted and emits allowance.exhausted", async () => {
    await makeOperator();
    const { account, subscriptionId } = await subscriber(100_000n);
    const before = await balanceOf(account.address);
    const response = await postUsage([
      { subscriptionId, amount: "60000", ref: "cap-1" },
      { subscriptionId, amount: "60000", ref: "cap-2" },
    ]);
    expect(response.status).toBe(202);
    const [first, second] = await settled(["cap-1", "cap-2"]);
    expect(first).toMatchObject({ ref: "cap-1", status: "settled" });
    expect(second).toMatchObject({ ref: "cap-2", status: "failed", failure: { code: "AllowanceExhausted" } });
    expect(await balanceOf(account.address)).toBe(before - 60_000n);
    const exhausted = await eventsFor("allowance.exhausted", (ref) => ref === "cap-2", 1);
    expect(exhausted).toHaveLength(1);
    expect(exhausted[0]?.data).toMatchObject({
      subscriptionId,
      amount: "60000",
      maxOverage: "100000",
      provider: provider.address,
    });
  });

  it("records the same ref once, and refuses the ref reused for another amount", async () => {
    await makeOperator();
    const { account, subscriptionId } = await subscriber(1_000_000n);
    const before = await balanceOf(account.address);
    const record = { subscriptionId, amount: "7000", ref: "once" };
    // Many at once: two inserts of one ref can race past each other's first check, and each unique
    // constraint of the row must then end in "already recorded", not an error (a 500 once, 1 run in 8).
    const concurrent = await Promise.all(Array.from({ length: 12 }, () => postUsage([record])));
    const again = await postUsage([record]);
    expect([...concurrent, again].map((r) => r.status)).toEqual([...concurrent, again].map(() => 202));
    const duplicates = await Promise.all(
      [...concurrent, again].map(
        async (r) => UsageResponseSchema.parse(await r.json()).accepted[0]?.duplicate,
      ),
    );
    expect(duplicates.filter((d) => d === false)).toHaveLength(1);
    await settled(["once"]);
    const conflict = await errorOf(await postUsage([{ ...record, amount: "8000" }]));
    expect(conflict).toMatchObject({ status: 409, code: "NonceAlreadyUsed" });
    expect(await balanceOf(account.address)).toBe(before - 7_000n);
    expect(await records(["once"])).toHaveLength(1);
  });

  it("refuses missing keys, other providers' subscriptions, unknown subscriptions and malformed records", async () => {
    const { subscriptionId } = await subscriber(1_000_000n);
    expect((await post("/usage", { records: [{ subscriptionId, amount: "1", ref: "x" }] })).status).toBe(401);
    const otherKey = await registerProvider(devnet.accounts[2]!);
    const foreign = await errorOf(await postUsage([{ subscriptionId, amount: "1", ref: "x" }], otherKey));
    expect(foreign).toMatchObject({ status: 400, details: { reason: "not_your_subscription" } });
    expect(
      (await errorOf(await postUsage([{ subscriptionId: "987654", amount: "1", ref: "x" }]))).status,
    ).toBe(404);
    for (const bad of [
      { subscriptionId, amount: "0", ref: "x" },
      { subscriptionId, amount: "1.5", ref: "x" },
      { subscriptionId, amount: "1", ref: "a".repeat(65) },
      { subscriptionId, amount: "1", ref: "has space" },
      { subscriptionId: "-1", amount: "1", ref: "x" },
    ]) {
      expect((await postUsage([bad])).status).toBe(400);
    }
    expect((await post("/usage", { records: [] }, auth())).status).toBe(400);
    expect((await fetch(`${tf.url}/usage`, { headers: auth() })).status).toBe(400);
  });
});

describe("usage settlement after a crash", () => {
  it("sends a batch recorded before its broadcast exactly once when the next settler starts", {
    timeout: 90_000,
  }, async () => {
    await makeOperator();
    const { account, subscriptionId } = await subscriber(1_000_000n);
    // Its own store, so the facilitator's running settler never sees these records.
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    try {
      const ctx = { ...tf.facilitator.context, store };
      const scope = { chainId: ctx.chainId, manager: devnet.contracts.subscriptionManager };
      const before = await balanceOf(account.address);
      await recordUsage(store, scope, provider.address, [
        { subscriptionId, amount: "11000", ref: "crash-a" },
        { subscriptionId, amount: "12000", ref: "crash-b" },
      ]);
      const crashing = createUsageSettler(ctx, {
        faults: {
          afterRecord: () => {
            throw new Error("simulated crash before broadcast");
          },
        },
      });
      await expect(crashing.runOnce()).rejects.toThrow("simulated crash");
      expect(await balanceOf(account.address)).toBe(before);

      const restarted = createUsageSettler(ctx);
      const result = await restarted.runOnce();
      expect(result.settled).toBe(2);
      expect(await balanceOf(account.address)).toBe(before - 23_000n);

      // Broadcast, then crash before the receipt is recorded: the next settler finds the receipt.
      await recordUsage(store, scope, provider.address, [{ subscriptionId, amount: "5000", ref: "crash-c" }]);
      const afterBroadcast = createUsageSettler(ctx, {
        faults: {
          afterBroadcast: () => {
            throw new Error("simulated crash after broadcast");
          },
        },
      });
      await expect(afterBroadcast.runOnce()).rejects.toThrow("simulated crash");
      await createUsageSettler(ctx).runOnce();
      await createUsageSettler(ctx).runOnce();
      expect(await balanceOf(account.address)).toBe(before - 28_000n);
      const rows = await store.query<{ ref: string; status: string }>(
        "SELECT ref, status FROM usage_records ORDER BY ref",
      );
      expect(rows).toEqual([
        { ref: "crash-a", status: "settled" },
        { ref: "crash-b", status: "settled" },
        { ref: "crash-c", status: "settled" },
      ]);
    } finally {
      await store.close();
    }
  });
});
