/**
 * Holds and approvals per token (docs/budgets.md, "Subscriptions"): an agent holding subscriptions
 * in two tokens has each token's SubscriptionManager allowance set to exactly what the budget holds
 * for that token's subscriptions, at subscribe and after every renewal, so both renew period after
 * period and neither approval lets the chain pull what the budget did not hold. On a real devnet with
 * a second USDC (another FiatToken v2.2) deployed beside the devnet's and served by the facilitator.
 */
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { collect } from "../src/chain/actions/subscriptions/collect.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getTokenAllowance } from "../src/chain/actions/usd/getTokenAllowance.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { mintFiatToken } from "../src/chain/actions/usdc/mintFiatToken.ts";
import { deployTollgate } from "../src/chain/deployTollgate.ts";
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
/** The second token: another FiatToken, deployed by the devnet's deployer, who is its minter. */
let otherUsd: Address;
const plans: { first: string; second: string } = { first: "", second: "" };

async function plan(token: Address, amount: bigint, overageUnitPrice: bigint): Promise<string> {
  const seller = devnet.accounts[1]!;
  const hash = await createPlan(devnet.walletClient(seller), {
    manager: devnet.contracts.subscriptionManager,
    token,
    amount,
    interval: BigInt(30 * DAY),
    includedUnits: 5n,
    overageUnitPrice,
  });
  return getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash })).toString();
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  otherUsd = (await deployTollgate(devnet.walletClient(devnet.deployer), devnet.publicClient)).usd;
  tf = await startTestFacilitator(devnet, { extraTokens: [otherUsd] });
  plans.first = await plan(devnet.contracts.usd, usd("0.05"), usd("0.002"));
  plans.second = await plan(otherUsd, usd("0.03"), usd("0.001"));
}, 120_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

const allowance = (token: Address, owner: Address) =>
  getTokenAllowance(devnet.publicClient, { token, owner, spender: devnet.contracts.subscriptionManager });
const balance = (token: Address, owner: Address) => getTokenBalance(devnet.publicClient, { token, owner });

describe("subscriptions in two tokens", () => {
  it("approve each token for exactly its own holds, and renew both period after period", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: usd("5") });
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await mintFiatToken(devnet.walletClient(devnet.deployer), {
        token: otherUsd,
        to: account.address,
        amount: usd("5"),
      }),
    });
    const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await budget.setLimits("two-tokens", { total: usd("2") });
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
    const keeper = createSubscriptionKeeper({
      agent: "two-tokens",
      payer,
      budget,
      chain: devnet.publicClient,
    });
    const first = await keeper.ensure({ planId: plans.first, desiredCap: usd("0.02") });
    const second = await keeper.ensure({ planId: plans.second, desiredCap: usd("0.01") });
    const holdOf = async (ref: string) =>
      (await budget.report("two-tokens")).subscriptions.holds.find((h) => h.ref === ref)?.held ?? 0n;
    const expectApprovalsEqualHolds = async () => {
      const [heldFirst, heldSecond] = [
        await holdOf(holdRefOf(first.record.id)),
        await holdOf(holdRefOf(second.record.id)),
      ];
      expect(await allowance(devnet.contracts.usd, account.address)).toBe(heldFirst);
      expect(await allowance(otherUsd, account.address)).toBe(heldSecond);
      return { heldFirst, heldSecond };
    };
    // At subscribe: each the next renewal and its cap with this period's cap, in its own token only.
    expect(await expectApprovalsEqualHolds()).toEqual({
      heldFirst: usd("0.02") + usd("0.05") + usd("0.02"),
      heldSecond: usd("0.01") + usd("0.03") + usd("0.01"),
    });
    const before = {
      first: await balance(devnet.contracts.usd, account.address),
      second: await balance(otherUsd, account.address),
    };

    const seller = devnet.walletClient(devnet.accounts[1]!);
    const manager = devnet.contracts.subscriptionManager;
    for (let period = 1; period <= 2; period++) {
      await devnet.advanceTime(31 * DAY);
      for (const { subscriptionId } of [first, second]) {
        const receipt = await devnet.publicClient.waitForTransactionReceipt({
          hash: await collect(seller, { manager, subscriptionId }),
        });
        expect(receipt.status).toBe("success");
      }
      const synced = await keeper.sync();
      expect(synced.map((s) => s.action)).toEqual(["none", "none"]);
      // Each renewal used its token's approval; the keeper grew both holds back and topped up both.
      await expectApprovalsEqualHolds();
      for (const { subscriptionId } of [first, second]) {
        expect((await getSubscriptionInfo(payer.facilitator, subscriptionId)).status).toBe("Active");
      }
    }
    // Two renewals of each, every one in the ledger: the loss over both tokens is the ledger's spend.
    const lost =
      before.first -
      (await balance(devnet.contracts.usd, account.address)) +
      (before.second - (await balance(otherUsd, account.address)));
    expect(lost).toBe(2n * (usd("0.05") + usd("0.03")));
    expect((await budget.report("two-tokens")).spent.total).toBe(lost + usd("0.05") + usd("0.03"));
    expect((await keeper.find(first.subscriptionId))?.token).toBe(devnet.contracts.usd.toLowerCase());
    expect((await keeper.find(second.subscriptionId))?.token).toBe(otherUsd.toLowerCase());
  }, 240_000);
});
