/**
 * Finding 9 of the security review: one stranger's plan must not stop every provider's renewals or
 * usage. Anyone may create a plan in any token; a token that answers a non-boolean word, reverts with a
 * huge payload or burns all the gas it is given, and a usage amount that overflows the cap check, used
 * to revert the whole `collectMany` / `deductAllowanceMany`, and the keeper put the poisoned
 * subscription at the head of every batch, so no one was renewed.
 *
 * Real devnet, real facilitator context and store, hostile tokens of the test's own
 * (test/fixtures/HostileTokens.sol), and — for the off-chain defences — the SubscriptionManager as it
 * was deployed before per-item isolation (test/fixtures/SubscriptionManagerBeforeIsolation.sol), since a
 * deployed manager cannot be upgraded and the facilitator must keep honest items flowing against it.
 */
import { type Address, type Hex, maxUint256 } from "viem";
import { deployContract, readContract, writeContract } from "viem/actions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../../src/chain/actions/subscriptions/createPlan.ts";
import { getSubscription } from "../../src/chain/actions/subscriptions/getSubscription.ts";
import { setOperator } from "../../src/chain/actions/subscriptions/setOperator.ts";
import { subscribe } from "../../src/chain/actions/subscriptions/subscribe.ts";
import { approveToken } from "../../src/chain/actions/usd/approveToken.ts";
import {
  getPlanIdFromReceipt,
  getSubscriptionIdFromReceipt,
} from "../../src/chain/events/decodeSubscriptionEvents.ts";
import { SubscriptionStatus } from "../../src/chain/events/subscriptionStatus.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createFacilitator, type Facilitator } from "../../src/facilitator/createFacilitator.ts";
import type { FacilitatorToken } from "../../src/facilitator/facilitatorToken.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { createRenewalKeeper } from "../../src/schemes/subscription/facilitator/renewalKeeper.ts";
import { createSubscriptionIndexer } from "../../src/schemes/subscription/facilitator/subscriptionIndexer.ts";
import { recordUsage } from "../../src/schemes/subscription/facilitator/usage/usageRecords.ts";
import { createUsageSettler } from "../../src/schemes/subscription/facilitator/usage/usageSettler.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import { compileFixture } from "../support/compileFixtures.ts";

const DAY = 86_400;
const INTERVAL = 30 * DAY;
const PRICE = 9_000_000n;

const hostile = compileFixture("HostileTokens.sol");
const beforeIsolation = compileFixture("SubscriptionManagerBeforeIsolation.sol").SubscriptionManager!;

let devnet: Devnet;
let provider: DevnetAccount;
let stranger: DevnetAccount;
let subscribers: DevnetAccount[];
let legacyManager: Address;
type HostileTokens = { nonBoolean: Address; hugeRevert: Address; burner: Address };
const started: { facilitator: Facilitator; close(): Promise<void> }[] = [];
let nextGasAccount = 7;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 12 });
  provider = devnet.accounts[1]!;
  stranger = devnet.accounts[2]!;
  subscribers = devnet.accounts.slice(3, 7);
  legacyManager = await deploy(devnet.deployer, beforeIsolation.abi, beforeIsolation.bytecode);
}, 60_000);

afterAll(async () => {
  for (const f of started) await f.close();
  await devnet?.stop();
});

async function wait(hash: Hex) {
  const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
  if (receipt.status !== "success") throw new Error(`transaction ${hash} reverted`);
  return receipt;
}

/** Fresh hostile tokens, not armed yet (each test arms its own). */
async function deployHostileTokens(): Promise<HostileTokens> {
  const one = (name: string) => deploy(stranger, hostile[name]!.abi, hostile[name]!.bytecode);
  return {
    nonBoolean: await one("NonBooleanToken"),
    hugeRevert: await one("HugeRevertToken"),
    burner: await one("GasBurnerToken"),
  };
}

async function deploy(from: DevnetAccount, abi: readonly unknown[], bytecode: Hex): Promise<Address> {
  const receipt = await wait(await deployContract(devnet.walletClient(from), { abi, bytecode }));
  return receipt.contractAddress!;
}

/**
 * A facilitator on `manager` serving the devnet USD and `extraTokens`, without its background workers
 * (the test drives the keeper and the settler), with a gas account of its own.
 */
async function facilitatorOn(manager: Address, extraTokens: Address[] = []): Promise<Facilitator> {
  const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  const known: FacilitatorToken[] = [
    {
      address: devnet.contracts.usd,
      name: devnet.token.name,
      version: devnet.token.version,
      symbol: "USDC",
      decimals: 6,
    },
    ...extraTokens.map((address, i) => ({
      address,
      name: `Listed ${i}`,
      version: "1",
      symbol: `L${i}`,
      decimals: 6,
    })),
  ];
  const facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[nextGasAccount++]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: manager,
    tokens: known,
    builtinModules: false,
  });
  await facilitator.start();
  started.push({
    facilitator,
    async close() {
      await facilitator.stop();
      await store.close();
    },
  });
  return facilitator;
}

async function planOn(manager: Address, owner: DevnetAccount, token: Address): Promise<bigint> {
  const hash = await createPlan(devnet.walletClient(owner), {
    manager,
    token,
    amount: PRICE,
    interval: BigInt(INTERVAL),
    includedUnits: 0n,
    overageUnitPrice: 1n,
  });
  return getPlanIdFromReceipt(await wait(hash));
}

async function subscribeTo(manager: Address, who: DevnetAccount, planId: bigint, maxOverage = 0n) {
  await wait(
    await approveToken(devnet.walletClient(who), {
      token: devnet.contracts.usd,
      spender: manager,
      amount: maxUint256,
    }),
  );
  // The manager deployed before per-item isolation predates the spend limit too: its subscribe takes two.
  const receipt = await wait(
    manager === legacyManager
      ? await writeContract(devnet.walletClient(who), {
          address: manager,
          abi: beforeIsolation.abi,
          functionName: "subscribe",
          args: [planId, maxOverage],
        })
      : await subscribe(devnet.walletClient(who), { manager, planId, maxOverage }),
  );
  return getSubscriptionIdFromReceipt(receipt);
}

async function arm(token: Address): Promise<void> {
  await wait(
    await writeContract(devnet.walletClient(stranger), {
      address: token,
      abi: hostile.NonBooleanToken!.abi,
      functionName: "arm",
    }),
  );
}

/** Hostile plans of the stranger's (subscribed while their tokens behave) and honest subscriptions. */
async function population(manager: Address, tokens: HostileTokens) {
  const poisoned = {
    nonBoolean: await subscribeTo(manager, stranger, await planOn(manager, stranger, tokens.nonBoolean)),
    hugeRevert: await subscribeTo(manager, stranger, await planOn(manager, stranger, tokens.hugeRevert)),
    burner: await subscribeTo(manager, stranger, await planOn(manager, stranger, tokens.burner)),
  };
  const honestPlan = await planOn(manager, provider, devnet.contracts.usd);
  const honest: bigint[] = [];
  for (const who of [...subscribers, ...subscribers.slice(0, 2)]) {
    honest.push(await subscribeTo(manager, who, honestPlan));
  }
  return { poisoned, honest };
}

const read = async (manager: Address, subscriptionId: bigint) =>
  manager === legacyManager
    ? ((await readContract(devnet.publicClient, {
        address: manager,
        abi: beforeIsolation.abi,
        functionName: "subscriptions",
        args: [subscriptionId],
      })) as { status: number; currentPeriodEnd: bigint; overageUsed: bigint })
    : getSubscription(devnet.publicClient, { manager, subscriptionId });

describe("renewals beside a hostile plan token", () => {
  it("one keeper run renews every honest subscription and marks those whose token answers a non-boolean word, a huge revert or burns all gas PastDue", async () => {
    const manager = devnet.contracts.subscriptionManager;
    const tokens = await deployHostileTokens();
    const { poisoned, honest } = await population(manager, tokens);
    // Here the operator listed the hostile tokens too, so the contract's own isolation is what holds.
    const facilitator = await facilitatorOn(manager, Object.values(tokens));
    const ctx = facilitator.context;
    const keeper = createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx), batchSize: 4 });
    for (const token of Object.values(tokens)) await arm(token);
    await devnet.advanceTime(INTERVAL + 60);

    const run = await keeper.runOnce();
    expect([...run.renewed].sort()).toEqual(honest.map(String).sort());
    expect([...run.failed].sort()).toEqual(Object.values(poisoned).map(String).sort());
    for (const id of honest) expect((await read(manager, id)).status).toBe(SubscriptionStatus.Active);
    for (const id of Object.values(poisoned)) {
      expect((await read(manager, id)).status).toBe(SubscriptionStatus.PastDue);
    }
    // The poisoned ones wait out their back-off instead of heading the next run.
    expect((await keeper.runOnce()).attempted).toEqual([]);
  }, 120_000);

  it("against a manager without per-item isolation, splits a reverting batch, sets the poisoned subscriptions aside and renews the rest in the same run; plans in tokens it does not serve are skipped", async () => {
    const tokens = await deployHostileTokens();
    const { poisoned, honest } = await population(legacyManager, tokens);
    // The facilitator serves the huge-revert and gas-burning tokens (say they turned hostile after
    // being listed) but not the non-boolean one.
    const facilitator = await facilitatorOn(legacyManager, [tokens.hugeRevert, tokens.burner]);
    const ctx = facilitator.context;
    const keeper = createRenewalKeeper(ctx, { indexer: createSubscriptionIndexer(ctx), batchSize: 4 });
    for (const token of Object.values(tokens)) await arm(token);
    await devnet.advanceTime(INTERVAL + 60);

    const run = await keeper.runOnce();
    expect([...run.renewed].sort()).toEqual(honest.map(String).sort());
    expect([...run.isolated].sort()).toEqual([poisoned.hugeRevert, poisoned.burner].map(String).sort());
    expect(run.attempted).not.toContain(poisoned.nonBoolean.toString());
    expect(run.isolated).not.toContain(poisoned.nonBoolean.toString());
    for (const id of honest) {
      const sub = await read(legacyManager, id);
      expect(sub.status).toBe(SubscriptionStatus.Active);
      expect(Number(sub.currentPeriodEnd)).toBeGreaterThan(run.chainTime);
    }
    const again = await keeper.runOnce();
    expect(again.attempted).toEqual([]);
    expect(again.isolated).toEqual([]);
  }, 120_000);
});

describe("usage beside an overflowing or hostile record", () => {
  /**
   * Provider and stranger both make the facilitator their operator; subscription `a` (the stranger's
   * plan) has overage used already, so a record of maxUint256 on it overflows `overageUsed + amount`.
   */
  async function usageSetup(manager: Address, facilitator: Facilitator) {
    const ctx = facilitator.context;
    const tokens = await deployHostileTokens();
    for (const who of [provider, stranger]) {
      await wait(
        await setOperator(devnet.walletClient(who), { manager, operator: ctx.gas.address, allowed: true }),
      );
    }
    const strangerPlan = await planOn(manager, stranger, devnet.contracts.usd);
    const providerPlan = await planOn(manager, provider, devnet.contracts.usd);
    const a = await subscribeTo(manager, subscribers[0]!, strangerPlan, 1_000_000n);
    const b = await subscribeTo(manager, subscribers[1]!, providerPlan, 1_000_000n);
    const c = await subscribeTo(manager, subscribers[2]!, providerPlan, 1_000_000n);
    const unknownToken = await subscribeTo(
      manager,
      stranger,
      await planOn(manager, stranger, tokens.nonBoolean),
      1_000_000n,
    );
    const scope = { chainId: ctx.chainId, manager };
    const settler = createUsageSettler(ctx, { indexer: createSubscriptionIndexer(ctx) });
    await recordUsage(ctx.store, scope, stranger.address, [
      { subscriptionId: a.toString(), amount: "4000", ref: "warm" },
    ]);
    expect(await settler.runOnce()).toMatchObject({ settled: 1 });

    await recordUsage(ctx.store, scope, stranger.address, [
      { subscriptionId: a.toString(), amount: maxUint256.toString(), ref: "overflow" },
      { subscriptionId: unknownToken.toString(), amount: "1000", ref: "unknown-token" },
    ]);
    await recordUsage(ctx.store, scope, provider.address, [
      { subscriptionId: b.toString(), amount: "3000", ref: "b-1" },
      { subscriptionId: c.toString(), amount: "2000", ref: "c-1" },
      { subscriptionId: b.toString(), amount: "1000", ref: "b-2" },
    ]);
    await arm(tokens.nonBoolean);
    await settler.runOnce();
    const rows = await ctx.store.query<{ ref: string; status: string; failure_code: string | null }>(
      "SELECT ref, status, failure_code FROM usage_records ORDER BY id",
    );
    return { rows: Object.fromEntries(rows.map((r) => [r.ref, r])), a, b, c };
  }

  it("settles every other record in the batch when one overflows the cap check or is on a plan in a token it does not serve", async () => {
    const manager = devnet.contracts.subscriptionManager;
    const facilitator = await facilitatorOn(manager);
    const { rows, a, b, c } = await usageSetup(manager, facilitator);
    expect(rows.overflow).toMatchObject({ status: "failed", failure_code: "AllowanceExhausted" });
    expect(rows["unknown-token"]).toMatchObject({ status: "failed", failure_code: "InvalidRequest" });
    for (const ref of ["b-1", "c-1", "b-2"]) expect(rows[ref]).toMatchObject({ status: "settled" });
    expect((await read(manager, a)).overageUsed).toBe(4000n);
    expect((await read(manager, b)).overageUsed).toBe(4000n);
    expect((await read(manager, c)).overageUsed).toBe(2000n);
  }, 120_000);

  it("against a manager without per-item isolation, fails the record that reverts alone and settles the rest in one run", async () => {
    const facilitator = await facilitatorOn(legacyManager);
    const { rows, b, c } = await usageSetup(legacyManager, facilitator);
    expect(rows.overflow).toMatchObject({ status: "failed" });
    expect(rows["unknown-token"]).toMatchObject({ status: "failed", failure_code: "InvalidRequest" });
    for (const ref of ["b-1", "c-1", "b-2"]) expect(rows[ref]).toMatchObject({ status: "settled" });
    expect((await read(legacyManager, b)).overageUsed).toBe(4000n);
    expect((await read(legacyManager, c)).overageUsed).toBe(2000n);
  }, 120_000);
});
