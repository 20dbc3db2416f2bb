/**
 * One shared approval once let a seller take far more than the agent's
 * per-provider limit. The wallet's single token approval to the SubscriptionManager covered the holds
 * of all its subscriptions; a seller whose plan renews every 5 seconds with overage at 1 USDC a unit
 * collected and deducted between two looks of the keeper (every 60 s) and took the approval held for
 * the wallet's other subscriptions. The keeper paused it only after the money had moved.
 *
 * Now (docs/subscriptions.md, docs/budgets.md): the keeper refuses a plan that renews more often than
 * it looks, and every subscription it takes out carries a spend limit the agent signed (the first
 * period plus what the budget holds for it), which the manager checks before every pull; whatever the
 * approval allows, a seller never takes more than the budget committed to its subscription.
 *
 * Real devnet, a real facilitator over HTTP (no renewal keeper: the sellers collect when they like),
 * the agent's real ledger and keeper on one store.
 */
import type { Address, Hex } from "viem";
import { keccak256, toHex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../../src/agent/budget/createBudgetLedger.ts";
import { collect } from "../../src/chain/actions/subscriptions/collect.ts";
import { createPlan } from "../../src/chain/actions/subscriptions/createPlan.ts";
import { deductAllowance } from "../../src/chain/actions/subscriptions/deductAllowance.ts";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer } from "../../src/client/createPayer.ts";
import {
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { createSubscriptionsModule } from "../../src/facilitator/subscriptionsModule.ts";
import { parseUnitsExact as usd } from "../../src/protocol/amount.ts";
import { systemClock } from "../../src/protocol/clock.ts";
import { createSubscriptionKeeper } from "../../src/schemes/subscription/agent/createSubscriptionKeeper.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";

const DAY = 86_400;

let devnet: Devnet;
let store: Store;
let facilitator: Facilitator;
let facilitatorServer: RunningServer;
let honest: DevnetAccount;
let greedy: DevnetAccount;
/** 0.30 a month, no overage. */
let honestPlan: bigint;
/** 0.01 every 5 seconds, overage 1 USDC a unit. */
let greedyPlan: bigint;
/** The first review's plan: 0.05 a month, overage 0.002 a unit. */
let greedyMonthly: bigint;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[5]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    builtinModules: false,
    modules: [createSubscriptionsModule({ keeper: false })],
  });
  await facilitator.start();
  facilitatorServer = await serveApp(facilitator.app);
  honest = devnet.accounts[1]!;
  greedy = devnet.accounts[2]!;
  const plan = async (seller: DevnetAccount, amount: bigint, interval: number, overage: bigint) =>
    getPlanIdFromReceipt(
      await devnet.publicClient.waitForTransactionReceipt({
        hash: await createPlan(devnet.walletClient(seller), {
          manager: devnet.contracts.subscriptionManager,
          token: devnet.contracts.usd,
          amount,
          interval: BigInt(interval),
          includedUnits: 0n,
          overageUnitPrice: overage,
        }),
      }),
    );
  honestPlan = await plan(honest, usd("0.30"), 30 * DAY, 0n);
  greedyPlan = await plan(greedy, usd("0.01"), 5, usd("1"));
  greedyMonthly = await plan(greedy, usd("0.05"), 30 * DAY, usd("0.002"));
}, 60_000);

afterAll(async () => {
  await facilitatorServer?.close();
  await facilitator?.stop();
  await store?.close();
  await devnet?.stop();
});

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

const GREEDY_LIMIT = usd("0.10");

/** An agent with 20 USDC, 1 USDC for the honest seller and 0.10 for the greedy one. */
async function agent(name: string, keeperOptions: { minIntervalSeconds?: number } = {}) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: usd("20") });
  const payer = createPayer({ account, network: devnet.network, facilitator: facilitatorServer.url, fetch });
  const budget = createBudgetLedger({ store, clock: systemClock });
  await budget.setLimits(name, {
    total: usd("5"),
    perProvider: { [honest.address]: usd("1"), [greedy.address]: GREEDY_LIMIT },
  });
  const keeper = createSubscriptionKeeper({
    agent: name,
    payer,
    budget,
    chain: devnet.publicClient,
    ...keeperOptions,
  });
  return { account, budget, keeper };
}

/** Sends a seller's transaction; a refusal on chain (cap, status, limit, allowance) moves nothing. */
async function attempt(send: () => Promise<Hex>): Promise<void> {
  try {
    await devnet.publicClient.waitForTransactionReceipt({ hash: await send() });
  } catch {
    // refused: nothing moved
  }
}

describe("a seller with a short interval and overage against one shared approval", () => {
  it("is refused before anything is signed when its plan renews more often than the keeper looks", async () => {
    const { account, keeper } = await agent("drain-refused");
    await keeper.ensure({ planId: honestPlan.toString() });
    const before = await balanceOf(account.address);
    await expect(
      keeper.ensure({ planId: greedyPlan.toString(), desiredCap: usd("1") }),
    ).rejects.toMatchObject({
      code: "BudgetExceeded",
    });
    expect(await balanceOf(account.address)).toBe(before);
  }, 60_000);

  it("takes no more than the agent's per-provider limit, renewing and deducting between the keeper's looks, and leaves the other seller's share", async () => {
    // A keeper that accepts the 5-second plan: the chain alone must bound the seller.
    const { account, budget, keeper } = await agent("drain-bounded", { minIntervalSeconds: 1 });
    const first = await keeper.ensure({ planId: honestPlan.toString() });
    const greedyStart = await balanceOf(greedy.address);
    const ensured = await keeper.ensure({ planId: greedyPlan.toString(), desiredCap: usd("1") });
    expect(ensured.created).toBe(true);
    const id = ensured.subscriptionId;
    const manager = devnet.contracts.subscriptionManager;
    const seller = devnet.walletClient(greedy);
    const taken = async () => (await balanceOf(greedy.address)) - greedyStart;

    // Ten 5-second periods between two looks of the keeper: overage to the cap, then the renewal.
    for (let round = 0; round < 10; round++) {
      for (const amount of [usd("1"), usd("0.09"), usd("0.05"), usd("0.01")]) {
        const ref = keccak256(toHex(`drain-${round}-${amount}`));
        await attempt(() => deductAllowance(seller, { manager, subscriptionId: id, amount, ref }));
        expect(await taken()).toBeLessThanOrEqual(GREEDY_LIMIT);
      }
      await devnet.advanceTime(5);
      await attempt(() => collect(seller, { manager, subscriptionId: id }));
      expect(await taken()).toBeLessThanOrEqual(GREEDY_LIMIT);
      // The keeper looking halfway changes nothing: the chain already refuses.
      if (round === 5) await keeper.sync();
    }
    await keeper.sync();
    expect(await taken()).toBeLessThanOrEqual(GREEDY_LIMIT);
    const report = await budget.report("drain-bounded");
    const greedyTally = report.perProvider.find((p) => p.provider === greedy.address);
    expect((greedyTally?.spent ?? 0n) + (greedyTally?.reserved ?? 0n)).toBeLessThanOrEqual(GREEDY_LIMIT);

    // The honest seller's renewal is still paid from the approval held for it.
    await devnet.advanceTime(31 * DAY);
    const honestBefore = await balanceOf(honest.address);
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await collect(devnet.walletClient(honest), { manager, subscriptionId: first.subscriptionId }),
    });
    expect((await balanceOf(honest.address)) - honestBefore).toBe(usd("0.30"));
    expect(await balanceOf(account.address)).toBeGreaterThan(0n);
  }, 120_000);

  it("the first review's drain beside another seller's subscription: overage to the cap and renewals with no look between take no more than the per-provider limit", async () => {
    const { budget, keeper } = await agent("drain-monthly");
    const first = await keeper.ensure({ planId: honestPlan.toString() });
    const greedyStart = await balanceOf(greedy.address);
    const { subscriptionId: id } = await keeper.ensure({
      planId: greedyMonthly.toString(),
      desiredCap: usd("0.02"),
    });
    const manager = devnet.contracts.subscriptionManager;
    const seller = devnet.walletClient(greedy);
    const taken = async () => (await balanceOf(greedy.address)) - greedyStart;
    for (let round = 0; round < 3; round++) {
      for (const amount of [usd("5"), usd("0.05"), usd("0.02"), usd("0.002")]) {
        const ref = keccak256(toHex(`monthly-${round}-${amount}`));
        await attempt(() => deductAllowance(seller, { manager, subscriptionId: id, amount, ref }));
      }
      await devnet.advanceTime(31 * DAY);
      await attempt(() => collect(seller, { manager, subscriptionId: id }));
      expect(await taken()).toBeLessThanOrEqual(GREEDY_LIMIT);
    }
    await keeper.sync();
    const report = await budget.report("drain-monthly");
    const greedyTally = report.perProvider.find((p) => p.provider === greedy.address);
    expect((greedyTally?.spent ?? 0n) + (greedyTally?.reserved ?? 0n)).toBeLessThanOrEqual(GREEDY_LIMIT);
    expect(greedyTally?.spent).toBe(await taken());
    // The honest seller's renewal is still paid from what was approved for it.
    const honestBefore = await balanceOf(honest.address);
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await collect(devnet.walletClient(honest), { manager, subscriptionId: first.subscriptionId }),
    });
    expect((await balanceOf(honest.address)) - honestBefore).toBe(usd("0.30"));
  }, 120_000);
});
