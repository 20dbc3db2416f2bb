/**
 * First subscriptions taken at once from one wallet (the model path runs a turn's tool calls in
 * parallel, docs/budgets.md "Subscriptions"): each signs a Subscribe intent with the wallet's manager
 * nonce and a permit with the token's permit nonce, both read from the facilitator, and the permit
 * sets the manager's allowance to the holds of the wallet's other subscriptions plus its own. Taken at
 * once, they would read the same nonces (one relay refused) and each other's holds not yet placed (an
 * approval below what the budget holds). On a real devnet: both subscribe, and the approval is
 * exactly the sum of the holds.
 */
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenAllowance } from "../src/chain/actions/usd/getTokenAllowance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { parseUnitsExact as usd } from "../src/protocol/amount.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { holdRefOf } from "../src/schemes/subscription/agent/agentSubscriptionRecords.ts";
import { createSubscriptionKeeper } from "../src/schemes/subscription/agent/createSubscriptionKeeper.ts";
import { getSubscriptionInfo } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DAY = 86_400;
let devnet: Devnet;
let tf: TestFacilitator;
const plans: string[] = [];

async function plan(amount: bigint, overageUnitPrice: bigint): Promise<string> {
  const hash = await createPlan(devnet.walletClient(devnet.accounts[1]!), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount,
    interval: BigInt(30 * DAY),
    includedUnits: 5n,
    overageUnitPrice,
  });
  return getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash })).toString();
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
  plans.push(await plan(usd("0.05"), usd("0.002")));
  plans.push(await plan(usd("0.03"), usd("0.001")));
  plans.push(await plan(usd("0.04"), usd("0.001")));
}, 120_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

const allowanceOf = (owner: Address) =>
  getTokenAllowance(devnet.publicClient, {
    token: devnet.contracts.usd,
    owner,
    spender: devnet.contracts.subscriptionManager,
  });

describe("first subscriptions at once from one wallet", () => {
  it("subscribes to three plans at once, each once, with the approval exactly the sum of their holds", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: usd("5") });
    const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await budget.setLimits("at-once", { total: usd("2") });
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
    // Two keepers of the wallet, as when each paid tool of a model run keeps its own: one takes two
    // plans, the other the third, and the first plan once more (the store's claim makes one of the two
    // asking for it wait).
    const keeper = () =>
      createSubscriptionKeeper({ agent: "at-once", payer, budget, chain: devnet.publicClient });
    const [one, two] = [keeper(), keeper()];
    const [a, b, c, again] = await Promise.all([
      one.ensure({ planId: plans[0]!, desiredCap: usd("0.01") }),
      one.ensure({ planId: plans[1]!, desiredCap: usd("0.01") }),
      two.ensure({ planId: plans[2]!, desiredCap: usd("0.01") }),
      two.ensure({ planId: plans[0]!, desiredCap: usd("0.01") }),
    ]);
    // The first plan was asked for twice at once: whichever keeper got the claim created it, the
    // other waited and was given the same subscription.
    expect([a!.created, again!.created].sort()).toEqual([false, true]);
    expect(again!.subscriptionId).toBe(a!.subscriptionId);
    const ensured = [a!.created ? a! : again!, b!, c!];
    expect(ensured.map((e) => e.created)).toEqual([true, true, true]);
    expect(new Set(ensured.map((e) => e.subscriptionId)).size).toBe(3);
    for (const { subscriptionId } of ensured) {
      expect((await getSubscriptionInfo(payer.facilitator, subscriptionId)).status).toBe("Active");
    }
    const report = await budget.report("at-once");
    const held = ensured.map(
      (e) => report.subscriptions.holds.find((h) => h.ref === holdRefOf(e.record.id))?.held ?? 0n,
    );
    // Each holds this period's cap, the next renewal and its cap; the approval covers all and no more.
    expect(held).toEqual([
      usd("0.01") + usd("0.05") + usd("0.01"),
      usd("0.01") + usd("0.03") + usd("0.01"),
      usd("0.01") + usd("0.04") + usd("0.01"),
    ]);
    expect(await allowanceOf(account.address)).toBe(held.reduce((a, b) => a + b, 0n));
    expect(report.spent.total).toBe(usd("0.05") + usd("0.03") + usd("0.04"));
  }, 120_000);
  it("two processes of the wallet (sharing the agent's store) take turns through the store: three plans at once, each once, the approval the sum of their holds", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: usd("5") });
    const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await budget.setLimits("two-processes", { total: usd("2") });
    // Each process has its own payer and keeper; their turns meet only in the store's
    // agent_wallet_turns row (the holder names stand for two process ids).
    const processOf = (holder: string) =>
      createSubscriptionKeeper({
        agent: "two-processes",
        payer: createPayer({ account, network: devnet.network, facilitator: tf.url }),
        budget,
        chain: devnet.publicClient,
        turnHolder: holder,
      });
    const [one, two] = [processOf("process-a"), processOf("process-b")];
    const ensured = await Promise.all([
      one.ensure({ planId: plans[0]!, desiredCap: usd("0.01") }),
      two.ensure({ planId: plans[1]!, desiredCap: usd("0.01") }),
      one.ensure({ planId: plans[2]!, desiredCap: usd("0.01") }),
    ]);
    expect(ensured.map((e) => e.created)).toEqual([true, true, true]);
    const report = await budget.report("two-processes");
    const held = ensured.map(
      (e) => report.subscriptions.holds.find((h) => h.ref === holdRefOf(e.record.id))?.held ?? 0n,
    );
    expect(await allowanceOf(account.address)).toBe(held.reduce((a, b) => a + b, 0n));
    expect(report.spent.total).toBe(usd("0.05") + usd("0.03") + usd("0.04"));
  }, 120_000);
});
