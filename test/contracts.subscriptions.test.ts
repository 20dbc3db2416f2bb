import {
  BaseError,
  ContractFunctionRevertedError,
  type Hex,
  keccak256,
  maxUint256,
  stringToBytes,
  type TransactionReceipt,
} from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { deployContract, writeContract } from "viem/actions";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  approveToken,
  cancel,
  cancelFor,
  collect,
  collectMany,
  createPlan,
  DeductionFailure,
  type Devnet,
  type DevnetAccount,
  decodeSubscriptionEvents,
  deductAllowance,
  deductAllowanceMany,
  deprecatePlan,
  getIsDue,
  getPermitNonce,
  getPlan,
  getPlanIdFromReceipt,
  getSubscription,
  getSubscriptionIdFromReceipt,
  getSubscriptionNonce,
  getSubscriptionSpend,
  getTokenBalance,
  NO_SPEND_LIMIT,
  pause,
  pauseFor,
  permit,
  resume,
  resumeFor,
  SubscriptionStatus,
  setMaxOverageFor,
  setOperator,
  setSpendLimitFor,
  signCancelIntent,
  signPauseIntent,
  signPermit,
  signResumeIntent,
  signSetMaxOverageIntent,
  signSetSpendLimitIntent,
  signSubscribeIntent,
  startDevnet,
  subscribe,
  subscribeFor,
  subscriptionManagerAbi,
} from "../src/chain/index.ts";
import { readSubscriptionPulls } from "../src/schemes/subscription/agent/readSubscriptionPulls.ts";
import { compileFixture } from "./support/compileFixtures.ts";

const DAY = 86_400n;
const INTERVAL = 30n * DAY;
const PRICE = 9_000_000n;
const ref = (text: string): Hex => keccak256(stringToBytes(text));

/** The custom error a rejected contract call reverted with. */
async function revertOf(
  call: Promise<unknown>,
): Promise<{ errorName: string | undefined; args: readonly unknown[] }> {
  try {
    await call;
  } catch (error) {
    if (error instanceof BaseError) {
      const reverted = error.walk((e) => e instanceof ContractFunctionRevertedError);
      if (reverted instanceof ContractFunctionRevertedError) {
        return { errorName: reverted.data?.errorName, args: reverted.data?.args ?? [] };
      }
    }
    throw error;
  }
  throw new Error("expected the call to revert");
}

describe("SubscriptionManager", () => {
  let devnet: Devnet;
  let snapshot: Hex;
  let provider: DevnetAccount;
  let subscriber: DevnetAccount;
  let operator: DevnetAccount;
  let stranger: DevnetAccount;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    [, provider, subscriber, operator, stranger] = devnet.accounts as [DevnetAccount, ...DevnetAccount[]] as [
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
    ];
  });
  afterAll(() => devnet.stop());
  beforeEach(async () => {
    snapshot = await devnet.snapshot();
  });
  afterEach(() => devnet.revert(snapshot));

  const manager = () => devnet.contracts.subscriptionManager;
  const wallet = (a: DevnetAccount) => devnet.walletClient(a);
  const wait = (hash: Hex): Promise<TransactionReceipt> =>
    devnet.publicClient.waitForTransactionReceipt({ hash });
  const balance = (owner: Hex) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const read = (id: bigint) =>
    getSubscription(devnet.publicClient, { manager: manager(), subscriptionId: id });
  const spend = (id: bigint) =>
    getSubscriptionSpend(devnet.publicClient, { manager: manager(), subscriptionId: id });
  const blockTime = async (receipt: TransactionReceipt) =>
    (await devnet.publicClient.getBlock({ blockNumber: receipt.blockNumber })).timestamp;

  async function newPlan(amount = PRICE): Promise<bigint> {
    const receipt = await wait(
      await createPlan(wallet(provider), {
        manager: manager(),
        token: devnet.contracts.usd,
        amount,
        interval: INTERVAL,
        includedUnits: 1000n,
        overageUnitPrice: 1000n,
      }),
    );
    return getPlanIdFromReceipt(receipt);
  }

  async function approve(who: DevnetAccount, amount = maxUint256): Promise<void> {
    await wait(await approveToken(wallet(who), { token: devnet.contracts.usd, spender: manager(), amount }));
  }

  async function newSubscription(who: DevnetAccount, planId: bigint, maxOverage = 50_000n) {
    await approve(who);
    const receipt = await wait(await subscribe(wallet(who), { manager: manager(), planId, maxOverage }));
    return { id: getSubscriptionIdFromReceipt(receipt), receipt };
  }

  it("runs the full lifecycle: subscribe, renew, pause (the period keeps running), resume, metered overage to the cap, cancel", async () => {
    const planId = await newPlan();
    expect(await getPlan(devnet.publicClient, { manager: manager(), planId })).toMatchObject({
      provider: provider.address,
      token: devnet.contracts.usd,
      amount: PRICE,
      interval: INTERVAL,
      includedUnits: 1000n,
      overageUnitPrice: 1000n,
      deprecated: false,
    });

    // Subscribe: the first period is charged at once.
    const [subBefore, provBefore] = [await balance(subscriber.address), await balance(provider.address)];
    const { id, receipt } = await newSubscription(subscriber, planId, 50_000n);
    expect(await balance(subscriber.address)).toBe(subBefore - PRICE);
    expect(await balance(provider.address)).toBe(provBefore + PRICE);
    const start = await blockTime(receipt);
    let sub = await read(id);
    expect(sub).toMatchObject({
      subscriber: subscriber.address,
      planId,
      status: SubscriptionStatus.Active,
      periodStart: start,
      currentPeriodEnd: start + INTERVAL,
      maxOverage: 50_000n,
      overageUsed: 0n,
    });
    expect(
      (await revertOf(collect(wallet(stranger), { manager: manager(), subscriptionId: id }))).errorName,
    ).toBe("NotDue");

    // Overage in the first cycle, then the renewal resets it.
    await wait(
      await deductAllowance(wallet(provider), {
        manager: manager(),
        subscriptionId: id,
        amount: 30_000n,
        ref: ref("u1"),
      }),
    );
    expect((await read(id)).overageUsed).toBe(30_000n);
    await devnet.advanceTime(INTERVAL);
    expect(await getIsDue(devnet.publicClient, { manager: manager(), subscriptionId: id })).toBe(true);
    const beforeRenewal = await balance(subscriber.address);
    const renewal = await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: id }));
    expect(await balance(subscriber.address)).toBe(beforeRenewal - PRICE);
    sub = await read(id);
    expect(sub.periodStart).toBe(start + INTERVAL);
    expect(sub.currentPeriodEnd).toBe(start + 2n * INTERVAL);
    expect(sub.overageUsed).toBe(0n);
    expect(decodeSubscriptionEvents(renewal.logs).map((e) => e.eventName)).toContain("SubscriptionRenewed");

    // Pause 10 days into the period: the 20 days left are recorded, the period keeps running, nothing is
    // due or charged while paused.
    await devnet.advanceTime(10n * DAY);
    const paused = await wait(await pause(wallet(subscriber), { manager: manager(), subscriptionId: id }));
    const pausedSub = await read(id);
    expect(pausedSub).toMatchObject({
      status: SubscriptionStatus.Paused,
      periodStart: sub.periodStart,
      currentPeriodEnd: sub.currentPeriodEnd,
      pausedRemaining: sub.currentPeriodEnd - (await blockTime(paused)),
    });
    await devnet.advanceTime(5n * DAY);
    const whilePaused = await balance(subscriber.address);
    expect(await getIsDue(devnet.publicClient, { manager: manager(), subscriptionId: id })).toBe(false);
    await wait(await collectMany(wallet(stranger), { manager: manager(), subscriptionIds: [id] }));
    expect(
      (await revertOf(collect(wallet(stranger), { manager: manager(), subscriptionId: id }))).errorName,
    ).toBe("InvalidStatus");
    expect(await balance(subscriber.address)).toBe(whilePaused);

    // Resume before the period's end: the same period goes on (the 5 paused days are not given back),
    // no charge, this cycle's overage kept.
    const resumed = await wait(await resume(wallet(subscriber), { manager: manager(), subscriptionId: id }));
    expect(await read(id)).toMatchObject({
      status: SubscriptionStatus.Active,
      periodStart: sub.periodStart,
      currentPeriodEnd: sub.currentPeriodEnd,
      pausedRemaining: 0n,
    });
    expect(decodeSubscriptionEvents(resumed.logs).map((e) => [e.eventName, e.args])).toEqual([
      ["SubscriptionResumed", { subscriptionId: id, periodEnd: sub.currentPeriodEnd, charged: false }],
    ]);
    expect(await balance(subscriber.address)).toBe(whilePaused);

    // Metered overage up to the cap; one unit more is refused.
    const provBeforeOverage = await balance(provider.address);
    await wait(
      await deductAllowance(wallet(provider), {
        manager: manager(),
        subscriptionId: id,
        amount: 50_000n,
        ref: ref("u2"),
      }),
    );
    expect(await balance(provider.address)).toBe(provBeforeOverage + 50_000n);
    const exhausted = await revertOf(
      deductAllowance(wallet(provider), {
        manager: manager(),
        subscriptionId: id,
        amount: 1n,
        ref: ref("u3"),
      }),
    );
    expect(exhausted).toEqual({ errorName: "AllowanceExhausted", args: [id, 50_000n, 50_000n, 1n] });

    // Cancel: final; no more renewals or deductions.
    const cancelled = await wait(
      await cancel(wallet(subscriber), { manager: manager(), subscriptionId: id }),
    );
    expect(decodeSubscriptionEvents(cancelled.logs)[0]).toMatchObject({
      eventName: "SubscriptionCancelled",
      args: { subscriptionId: id, by: subscriber.address },
    });
    expect((await read(id)).status).toBe(SubscriptionStatus.Cancelled);
    await devnet.advanceTime(INTERVAL);
    expect(
      (await revertOf(collect(wallet(stranger), { manager: manager(), subscriptionId: id }))).errorName,
    ).toBe("InvalidStatus");
  });

  it("never extends a paid period through relayed pause/resume cycles (the subscriber cannot stretch one period)", async () => {
    const planId = await newPlan();
    const { id, receipt } = await newSubscription(subscriber, planId);
    const start = await blockTime(receipt);
    const end = start + INTERVAL;
    const relayer = wallet(operator);
    const chainId = devnet.chain.id;
    const deadline = start + 10n * INTERVAL;
    const nonce = () =>
      getSubscriptionNonce(devnet.publicClient, { manager: manager(), subscriber: subscriber.address });
    const intent = async (sign: typeof signPauseIntent) =>
      sign(subscriber.account, {
        chainId,
        manager: manager(),
        subscriptionId: id,
        deadline,
        nonce: await nonce(),
      });
    const paidAfterSubscribe = await balance(subscriber.address);

    // The attack: resume just before using the service, pause right after, gaslessly through a relayer.
    // Each cycle is 1 day active and 4 days paused; five cycles take 25 of the 30 paid days.
    const pauseIntent = async () =>
      pauseFor(relayer, {
        manager: manager(),
        subscriptionId: id,
        deadline,
        signature: await intent(signPauseIntent),
      });
    for (let cycle = 0; cycle < 5; cycle++) {
      await devnet.advanceTime(DAY);
      await wait(await pauseIntent());
      await devnet.advanceTime(4n * DAY);
      const resumed = await wait(
        await resumeFor(relayer, {
          manager: manager(),
          subscriptionId: id,
          deadline,
          signature: await intent(signResumeIntent),
        }),
      );
      expect(await blockTime(resumed)).toBeLessThan(end);
      // The paused days are not given back: the period still ends where it was paid to end.
      expect(await read(id)).toMatchObject({
        status: SubscriptionStatus.Active,
        periodStart: start,
        currentPeriodEnd: end,
      });
      expect(await balance(subscriber.address)).toBe(paidAfterSubscribe);
    }

    // Paused again on day 26 and kept paused past the end: nothing is due or collectable (no renewal while
    // paused) and nothing is charged.
    await devnet.advanceTime(DAY);
    await wait(await pauseIntent());
    await devnet.advanceTime(INTERVAL);
    expect(await getIsDue(devnet.publicClient, { manager: manager(), subscriptionId: id })).toBe(false);
    expect(
      (await revertOf(collect(wallet(stranger), { manager: manager(), subscriptionId: id }))).errorName,
    ).toBe("InvalidStatus");
    await wait(await collectMany(wallet(stranger), { manager: manager(), subscriptionIds: [id] }));
    expect(await balance(subscriber.address)).toBe(paidAfterSubscribe);

    // Resuming after the end buys exactly one new period, starting now.
    const resumed = await wait(
      await resumeFor(relayer, {
        manager: manager(),
        subscriptionId: id,
        deadline,
        signature: await intent(signResumeIntent),
      }),
    );
    const now = await blockTime(resumed);
    expect(await read(id)).toMatchObject({
      status: SubscriptionStatus.Active,
      periodStart: now,
      currentPeriodEnd: now + INTERVAL,
      overageUsed: 0n,
    });
    expect(await balance(subscriber.address)).toBe(paidAfterSubscribe - PRICE);
    expect(decodeSubscriptionEvents(resumed.logs).map((e) => [e.eventName, e.args])).toEqual([
      [
        "SubscriptionRenewed",
        { subscriptionId: id, planId, amount: PRICE, periodStart: now, periodEnd: now + INTERVAL },
      ],
      ["SubscriptionResumed", { subscriptionId: id, periodEnd: now + INTERVAL, charged: true }],
    ]);
  });

  it("charges a new period when resuming after the period ended while paused; a failed pull leaves it Paused", async () => {
    const planId = await newPlan();
    const { id, receipt } = await newSubscription(subscriber, planId);
    const end = (await blockTime(receipt)) + INTERVAL;
    await devnet.advanceTime(10n * DAY);
    await wait(await pause(wallet(subscriber), { manager: manager(), subscriptionId: id }));
    await devnet.advanceTime(25n * DAY);
    expect((await devnet.publicClient.getBlock()).timestamp).toBeGreaterThanOrEqual(end);

    // Cannot pay: the resume reverts and the subscription stays Paused with its old period.
    await approve(subscriber, 0n);
    expect(
      (await revertOf(resume(wallet(subscriber), { manager: manager(), subscriptionId: id }))).errorName,
    ).toBe("TransferFailed");
    expect(await read(id)).toMatchObject({ status: SubscriptionStatus.Paused, currentPeriodEnd: end });

    await approve(subscriber);
    const before = await balance(subscriber.address);
    const resumed = await wait(await resume(wallet(subscriber), { manager: manager(), subscriptionId: id }));
    const now = await blockTime(resumed);
    expect(await balance(subscriber.address)).toBe(before - PRICE);
    expect(await read(id)).toMatchObject({
      status: SubscriptionStatus.Active,
      periodStart: now,
      currentPeriodEnd: now + INTERVAL,
      pausedRemaining: 0n,
    });
    // What an agent's keeper reads back from the events is what left the wallet: a charged resume emits
    // SubscriptionRenewed and SubscriptionResumed(charged) for one pull, counted once.
    const pulls = await readSubscriptionPulls(devnet.publicClient, {
      manager: manager(),
      subscriptionId: id,
      fromBlock: receipt.blockNumber,
    });
    expect(pulls.total).toBe(2n * PRICE);
  });

  it("charges a new period at once when resuming a subscription that was due when paused", async () => {
    const planId = await newPlan();
    const { id } = await newSubscription(subscriber, planId);
    await devnet.advanceTime(INTERVAL + DAY);
    await wait(await pause(wallet(subscriber), { manager: manager(), subscriptionId: id }));
    await devnet.advanceTime(5n * DAY);
    const before = await balance(subscriber.address);
    const receipt = await wait(await resume(wallet(subscriber), { manager: manager(), subscriptionId: id }));
    expect(await balance(subscriber.address)).toBe(before - PRICE);
    const now = await blockTime(receipt);
    expect(await read(id)).toMatchObject({
      status: SubscriptionStatus.Active,
      periodStart: now,
      currentPeriodEnd: now + INTERVAL,
    });
    const resumedEvent = decodeSubscriptionEvents(receipt.logs).find(
      (e) => e.eventName === "SubscriptionResumed",
    );
    expect(resumedEvent?.args).toMatchObject({ subscriptionId: id, charged: true });
  });

  it("refuses new subscribers on a deprecated plan and names the successor", async () => {
    const oldPlan = await newPlan();
    const successor = await newPlan(12_000_000n);
    await wait(
      await deprecatePlan(wallet(provider), {
        manager: manager(),
        planId: oldPlan,
        successorPlanId: successor,
      }),
    );
    await approve(subscriber);
    expect(
      await revertOf(subscribe(wallet(subscriber), { manager: manager(), planId: oldPlan, maxOverage: 0n })),
    ).toEqual({
      errorName: "PlanIsDeprecated",
      args: [oldPlan, successor],
    });
    expect(
      (
        await revertOf(
          deprecatePlan(wallet(stranger), { manager: manager(), planId: successor, successorPlanId: 0n }),
        )
      ).errorName,
    ).toBe("NotPlanProvider");
  });

  it("marks a subscription PastDue with an event when the renewal pull fails, and recovers on a later collect", async () => {
    const planId = await newPlan();
    const { id } = await newSubscription(subscriber, planId);
    await approve(subscriber, 0n);
    await devnet.advanceTime(INTERVAL);
    const failed = await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: id }));
    expect(failed.status).toBe("success");
    const event = decodeSubscriptionEvents(failed.logs).find((e) => e.eventName === "RenewalFailed");
    expect(event?.args).toMatchObject({ subscriptionId: id, planId, amount: PRICE });
    expect((await read(id)).status).toBe(SubscriptionStatus.PastDue);

    await devnet.advanceTime(3n * DAY);
    await approve(subscriber);
    const recovered = await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: id }));
    const now = await blockTime(recovered);
    // The new period starts at recovery: the days spent PastDue (without service) are not billed.
    expect(await read(id)).toMatchObject({
      status: SubscriptionStatus.Active,
      periodStart: now,
      currentPeriodEnd: now + INTERVAL,
    });
  });

  it("subscribes through a relayer with a signed intent and a permit while the subscriber holds no ETH", async () => {
    const planId = await newPlan();
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 20_000_000n });
    expect(await devnet.publicClient.getBalance({ address: account.address })).toBe(0n);
    const relayer = wallet(operator);
    const chainId = devnet.chain.id;
    const deadline = (await devnet.publicClient.getBlock()).timestamp + 600n;
    const permitSignature = await signPermit(account, {
      domain: { name: "USD Coin", version: "2", chainId, verifyingContract: devnet.contracts.usd },
      spender: manager(),
      value: maxUint256,
      nonce: await getPermitNonce(devnet.publicClient, {
        token: devnet.contracts.usd,
        owner: account.address,
      }),
      deadline,
    });
    await wait(
      await permit(relayer, {
        token: devnet.contracts.usd,
        owner: account.address,
        spender: manager(),
        value: maxUint256,
        deadline,
        signature: permitSignature,
      }),
    );
    const nonce = await getSubscriptionNonce(devnet.publicClient, {
      manager: manager(),
      subscriber: account.address,
    });
    const intent = await signSubscribeIntent(account, {
      chainId,
      manager: manager(),
      planId,
      maxOverage: 7n,
      spendLimit: NO_SPEND_LIMIT,
      nonce,
      deadline,
    });
    const receipt = await wait(
      await subscribeFor(relayer, {
        manager: manager(),
        subscriber: account.address,
        planId,
        maxOverage: 7n,
        spendLimit: NO_SPEND_LIMIT,
        deadline,
        signature: intent,
      }),
    );
    const id = getSubscriptionIdFromReceipt(receipt);
    expect(await read(id)).toMatchObject({
      subscriber: account.address,
      status: SubscriptionStatus.Active,
      maxOverage: 7n,
    });
    expect(await balance(account.address)).toBe(20_000_000n - PRICE);
    expect(await devnet.publicClient.getBalance({ address: account.address })).toBe(0n);
    // The intent's nonce is spent: a replay is refused.
    expect(
      (
        await revertOf(
          subscribeFor(relayer, {
            manager: manager(),
            subscriber: account.address,
            planId,
            maxOverage: 7n,
            spendLimit: NO_SPEND_LIMIT,
            deadline,
            signature: intent,
          }),
        )
      ).errorName,
    ).toBe("InvalidSignature");
  });

  it("relays pause, resume, overage cap and cancel intents signed by the subscriber", async () => {
    const planId = await newPlan();
    const { id } = await newSubscription(subscriber, planId);
    const relayer = wallet(operator);
    const chainId = devnet.chain.id;
    const deadline = (await devnet.publicClient.getBlock()).timestamp + 3600n;
    const nonce = () =>
      getSubscriptionNonce(devnet.publicClient, { manager: manager(), subscriber: subscriber.address });
    const common = { chainId, manager: manager(), subscriptionId: id, deadline };

    let signature = await signPauseIntent(subscriber.account, { ...common, nonce: await nonce() });
    await wait(await pauseFor(relayer, { manager: manager(), subscriptionId: id, deadline, signature }));
    expect((await read(id)).status).toBe(SubscriptionStatus.Paused);

    signature = await signResumeIntent(subscriber.account, { ...common, nonce: await nonce() });
    await wait(await resumeFor(relayer, { manager: manager(), subscriptionId: id, deadline, signature }));
    expect((await read(id)).status).toBe(SubscriptionStatus.Active);

    signature = await signSetMaxOverageIntent(subscriber.account, {
      ...common,
      maxOverage: 123n,
      nonce: await nonce(),
    });
    await wait(
      await setMaxOverageFor(relayer, {
        manager: manager(),
        subscriptionId: id,
        maxOverage: 123n,
        deadline,
        signature,
      }),
    );
    expect((await read(id)).maxOverage).toBe(123n);

    // An intent signed by someone else is refused.
    const forged = await stranger.account.signTypedData({
      domain: { name: "Tollgate SubscriptionManager", version: "1", chainId, verifyingContract: manager() },
      types: {
        Cancel: [
          { name: "subscriptionId", type: "uint256" },
          { name: "nonce", type: "uint256" },
          { name: "deadline", type: "uint256" },
        ],
      },
      primaryType: "Cancel",
      message: { subscriptionId: id, nonce: await nonce(), deadline },
    });
    expect(
      (
        await revertOf(
          cancelFor(relayer, { manager: manager(), subscriptionId: id, deadline, signature: forged }),
        )
      ).errorName,
    ).toBe("InvalidSignature");
    signature = await signCancelIntent(subscriber.account, { ...common, nonce: await nonce() });
    await wait(await cancelFor(relayer, { manager: manager(), subscriptionId: id, deadline, signature }));
    expect((await read(id)).status).toBe(SubscriptionStatus.Cancelled);
  });

  describe("the spend limit a subscriber signs", () => {
    it("bounds everything pulled for one subscription, whatever the shared approval allows: renewals go PastDue, deductions fail, a resume reverts", async () => {
      const planId = await newPlan(1_000n);
      await approve(subscriber); // one unlimited approval shared by both subscriptions below
      const subscribeLimited = async (spendLimit: bigint) =>
        getSubscriptionIdFromReceipt(
          await wait(
            await subscribe(wallet(subscriber), {
              manager: manager(),
              planId,
              maxOverage: 5_000n,
              spendLimit,
            }),
          ),
        );
      const a = await subscribeLimited(3_500n);
      const b = await subscribeLimited(2_000n);
      expect(await spend(a)).toEqual({ spendLimit: 3_500n, spent: 1_000n });
      const start = await balance(subscriber.address);

      // Overage: a deduction that would pass the limit fails (one call reverts, a batch item fails alone).
      expect(
        (
          await revertOf(
            deductAllowance(wallet(provider), {
              manager: manager(),
              subscriptionId: a,
              amount: 2_600n,
              ref: ref("a-big"),
            }),
          )
        ).errorName,
      ).toBe("SpendLimitReached");
      const batch = await wait(
        await deductAllowanceMany(wallet(provider), {
          manager: manager(),
          subscriptionIds: [a, a],
          amounts: [2_000n, 600n],
          refs: [ref("a1"), ref("a2")],
        }),
      );
      expect(
        decodeSubscriptionEvents(batch.logs).map((e) => [
          e.eventName,
          (e.args as { reason?: number }).reason,
        ]),
      ).toEqual([
        ["AllowanceDeducted", undefined],
        ["DeductionFailed", DeductionFailure.SpendLimit],
      ]);
      expect((await spend(a)).spent).toBe(3_000n);

      // A renewal that would pass the limit is not pulled: PastDue, RenewalFailed says why.
      await devnet.advanceTime(INTERVAL);
      const renewal = await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: a }));
      const failed = decodeSubscriptionEvents(renewal.logs).find((e) => e.eventName === "RenewalFailed");
      expect(failed).toBeDefined();
      expect((await read(a)).status).toBe(SubscriptionStatus.PastDue);
      // b renews from the same approval, within its own limit, and stops at it.
      await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: b }));
      expect((await read(b)).status).toBe(SubscriptionStatus.Active);
      expect((await spend(b)).spent).toBe(2_000n);
      await wait(await pause(wallet(subscriber), { manager: manager(), subscriptionId: b }));
      await devnet.advanceTime(INTERVAL);
      expect(
        (await revertOf(resume(wallet(subscriber), { manager: manager(), subscriptionId: b }))).errorName,
      ).toBe("SpendLimitReached");
      expect(await balance(subscriber.address)).toBe(start - 2_000n - 1_000n);

      // The subscriber raises a limit with a relayed intent; the renewal then goes through.
      const deadline = (await devnet.publicClient.getBlock()).timestamp + 3600n;
      const nonce = await getSubscriptionNonce(devnet.publicClient, {
        manager: manager(),
        subscriber: subscriber.address,
      });
      const signature = await signSetSpendLimitIntent(subscriber.account, {
        chainId: devnet.chain.id,
        manager: manager(),
        subscriptionId: a,
        spendLimit: 4_000n,
        nonce,
        deadline,
      });
      await wait(
        await setSpendLimitFor(wallet(operator), {
          manager: manager(),
          subscriptionId: a,
          spendLimit: 4_000n,
          deadline,
          signature,
        }),
      );
      await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: a }));
      expect((await read(a)).status).toBe(SubscriptionStatus.Active);
      expect(await spend(a)).toEqual({ spendLimit: 4_000n, spent: 4_000n });
    });

    it("refuses a subscribe whose first period is above the limit, and a relayed subscribe whose signed limit differs", async () => {
      const planId = await newPlan(1_000n);
      await approve(subscriber);
      expect(
        (
          await revertOf(
            subscribe(wallet(subscriber), { manager: manager(), planId, maxOverage: 0n, spendLimit: 999n }),
          )
        ).errorName,
      ).toBe("SpendLimitReached");
      const deadline = (await devnet.publicClient.getBlock()).timestamp + 3600n;
      const nonce = await getSubscriptionNonce(devnet.publicClient, {
        manager: manager(),
        subscriber: subscriber.address,
      });
      const signature = await signSubscribeIntent(subscriber.account, {
        chainId: devnet.chain.id,
        manager: manager(),
        planId,
        maxOverage: 0n,
        spendLimit: 1_000n,
        nonce,
        deadline,
      });
      expect(
        (
          await revertOf(
            subscribeFor(wallet(operator), {
              manager: manager(),
              subscriber: subscriber.address,
              planId,
              maxOverage: 0n,
              spendLimit: NO_SPEND_LIMIT,
              deadline,
              signature,
            }),
          )
        ).errorName,
      ).toBe("InvalidSignature");
    });
  });

  it("lets only the plan's provider or its operator deduct allowance", async () => {
    const planId = await newPlan();
    const { id } = await newSubscription(subscriber, planId);
    const args = { manager: manager(), subscriptionId: id, amount: 1_000n, ref: ref("op") };
    expect((await revertOf(deductAllowance(wallet(stranger), args))).errorName).toBe("NotProviderOrOperator");
    expect((await revertOf(deductAllowance(wallet(operator), args))).errorName).toBe("NotProviderOrOperator");
    await wait(
      await setOperator(wallet(provider), { manager: manager(), operator: operator.address, allowed: true }),
    );
    const receipt = await wait(await deductAllowance(wallet(operator), args));
    expect(decodeSubscriptionEvents(receipt.logs)[0]).toMatchObject({
      eventName: "AllowanceDeducted",
      args: { subscriptionId: id, ref: ref("op"), amount: 1_000n, overageUsed: 1_000n },
    });
    await wait(
      await setOperator(wallet(provider), { manager: manager(), operator: operator.address, allowed: false }),
    );
    expect((await revertOf(deductAllowance(wallet(operator), args))).errorName).toBe("NotProviderOrOperator");
  });

  it("collectMany renews the due, marks a failing pull PastDue and skips the ones not due", async () => {
    const planId = await newPlan();
    const payer = await newSubscription(subscriber, planId);
    const broke = await newSubscription(stranger, planId);
    await devnet.advanceTime(INTERVAL);
    const notDue = await newSubscription(operator, planId);
    await approve(stranger, 0n);
    const receipt = await wait(
      await collectMany(wallet(provider), {
        manager: manager(),
        subscriptionIds: [payer.id, broke.id, notDue.id],
      }),
    );
    const events = decodeSubscriptionEvents(receipt.logs).map((e) => [
      e.eventName,
      (e.args as { subscriptionId?: bigint }).subscriptionId,
    ]);
    expect(events).toEqual([
      ["SubscriptionRenewed", payer.id],
      ["RenewalFailed", broke.id],
    ]);
    expect((await read(payer.id)).status).toBe(SubscriptionStatus.Active);
    expect((await read(broke.id)).status).toBe(SubscriptionStatus.PastDue);
    expect((await read(notDue.id)).periodStart).toBe(await blockTime(notDue.receipt));
  });

  it("deductAllowanceMany reports each item alone: an exhausted one does not stop the others", async () => {
    const planId = await newPlan();
    const a = await newSubscription(subscriber, planId, 10_000n);
    const b = await newSubscription(stranger, planId, 10_000n);
    const before = await balance(subscriber.address);
    const receipt = await wait(
      await deductAllowanceMany(wallet(provider), {
        manager: manager(),
        subscriptionIds: [a.id, b.id, a.id],
        amounts: [4_000n, 20_000n, 6_000n],
        refs: [ref("a1"), ref("b1"), ref("a2")],
      }),
    );
    const events = decodeSubscriptionEvents(receipt.logs);
    expect(events.map((e) => e.eventName)).toEqual([
      "AllowanceDeducted",
      "DeductionFailed",
      "AllowanceDeducted",
    ]);
    expect(events[1]?.args).toMatchObject({
      subscriptionId: b.id,
      reason: DeductionFailure.AllowanceExhausted,
    });
    expect((await read(a.id)).overageUsed).toBe(10_000n);
    expect((await read(b.id)).overageUsed).toBe(0n);
    expect(await balance(subscriber.address)).toBe(before - 10_000n);
    // A caller fault (an unknown id) reverts the whole batch.
    expect(
      (
        await revertOf(
          deductAllowanceMany(wallet(provider), {
            manager: manager(),
            subscriptionIds: [a.id, 999n],
            amounts: [1n, 1n],
            refs: [ref("x"), ref("y")],
          }),
        )
      ).errorName,
    ).toBe("SubscriptionNotFound");
  });

  it("deducts under a provider's ref at most once; a failed item leaves its ref unused", async () => {
    const planId = await newPlan();
    const { id } = await newSubscription(subscriber, planId, 10_000n);
    const before = await balance(subscriber.address);
    const once = { manager: manager(), subscriptionId: id, amount: 1_000n, ref: ref("once") };
    await wait(await deductAllowance(wallet(provider), once));
    const refUsed = (owner: Hex, r: Hex) =>
      devnet.publicClient.readContract({
        address: manager(),
        abi: subscriptionManagerAbi,
        functionName: "refUsed",
        args: [owner, r],
      });
    expect(await refUsed(provider.address, ref("once"))).toBe(true);
    expect(await revertOf(deductAllowance(wallet(provider), once))).toMatchObject({
      errorName: "RefAlreadyUsed",
      args: [id, ref("once")],
    });

    // In a batch: a ref used before, and one used twice in the batch, deduct once; a failed item does not
    // use up its ref.
    const receipt = await wait(
      await deductAllowanceMany(wallet(provider), {
        manager: manager(),
        subscriptionIds: [id, id, id, id],
        amounts: [1_000n, 2_000n, 2_000n, 20_000n],
        refs: [ref("once"), ref("m1"), ref("m1"), ref("big")],
      }),
    );
    const events = decodeSubscriptionEvents(receipt.logs);
    expect(events.map((e) => [e.eventName, (e.args as { reason?: number }).reason])).toEqual([
      ["DeductionFailed", DeductionFailure.RefUsed],
      ["AllowanceDeducted", undefined],
      ["DeductionFailed", DeductionFailure.RefUsed],
      ["DeductionFailed", DeductionFailure.AllowanceExhausted],
    ]);
    expect(await refUsed(provider.address, ref("big"))).toBe(false);
    expect((await read(id)).overageUsed).toBe(3_000n);
    expect(await balance(subscriber.address)).toBe(before - 3_000n);
    await wait(
      await deductAllowanceMany(wallet(provider), {
        manager: manager(),
        subscriptionIds: [id],
        amounts: [5_000n],
        refs: [ref("big")],
      }),
    );
    expect((await read(id)).overageUsed).toBe(8_000n);

    // Refs are per provider: another provider deducts under the same bytes32.
    const other = await wait(
      await createPlan(wallet(stranger), {
        manager: manager(),
        token: devnet.contracts.usd,
        amount: PRICE,
        interval: INTERVAL,
        includedUnits: 1000n,
        overageUnitPrice: 1000n,
      }),
    );
    const theirs = await newSubscription(subscriber, getPlanIdFromReceipt(other), 10_000n);
    await wait(await deductAllowance(wallet(stranger), { ...once, subscriptionId: theirs.id }));
    expect((await read(theirs.id)).overageUsed).toBe(1_000n);
  });

  describe("a plan token cannot stop a batch of other subscriptions", () => {
    const hostile = compileFixture("HostileTokens.sol");

    async function deployFixture(name: string): Promise<Hex> {
      const { abi, bytecode } = hostile[name]!;
      const receipt = await wait(await deployContract(wallet(stranger), { abi, bytecode }));
      return receipt.contractAddress!;
    }

    async function arm(token: Hex): Promise<void> {
      await wait(
        await writeContract(wallet(stranger), {
          address: token,
          abi: hostile.NonBooleanToken!.abi,
          functionName: "arm",
        }),
      );
    }

    /** A stranger's plan in `token`, subscribed by the stranger while the token still behaves. */
    async function strangerSubscription(token: Hex): Promise<bigint> {
      const planReceipt = await wait(
        await createPlan(wallet(stranger), {
          manager: manager(),
          token,
          amount: PRICE,
          interval: INTERVAL,
          includedUnits: 0n,
          overageUnitPrice: 0n,
        }),
      );
      const planId = getPlanIdFromReceipt(planReceipt);
      const receipt = await wait(
        await subscribe(wallet(stranger), { manager: manager(), planId, maxOverage: 0n }),
      );
      return getSubscriptionIdFromReceipt(receipt);
    }

    it.each([
      ["answers a non-boolean word", "NonBooleanToken"],
      ["reverts with the largest payload its gas pays for", "HugeRevertToken"],
      ["burns all the gas it is given", "GasBurnerToken"],
    ])("collectMany renews every honest subscription beside ones whose plan token %s", async (_, fixture) => {
      const planId = await newPlan();
      const honest = [
        (await newSubscription(subscriber, planId)).id,
        (await newSubscription(operator, planId)).id,
        (await newSubscription(subscriber, planId)).id,
      ];
      const token = await deployFixture(fixture);
      const poisoned = [await strangerSubscription(token), await strangerSubscription(token)];
      await arm(token);
      await devnet.advanceTime(INTERVAL);
      const providerBefore = await balance(provider.address);

      // A poisoned item sits first and another between the honest ones, as in a keeper's batch.
      const ids = [poisoned[0]!, honest[0]!, honest[1]!, poisoned[1]!, honest[2]!];
      const receipt = await wait(
        await collectMany(wallet(provider), { manager: manager(), subscriptionIds: ids }),
      );
      expect(receipt.status).toBe("success");
      const events = decodeSubscriptionEvents(receipt.logs);
      expect(
        events.map((e) => [e.eventName, (e.args as { subscriptionId?: bigint }).subscriptionId]),
      ).toEqual([
        ["RenewalFailed", poisoned[0]],
        ["SubscriptionRenewed", honest[0]],
        ["SubscriptionRenewed", honest[1]],
        ["RenewalFailed", poisoned[1]],
        ["SubscriptionRenewed", honest[2]],
      ]);
      for (const id of honest) expect((await read(id)).status).toBe(SubscriptionStatus.Active);
      for (const id of poisoned) expect((await read(id)).status).toBe(SubscriptionStatus.PastDue);
      expect(await balance(provider.address)).toBe(providerBefore + 3n * PRICE);
      // The revert data kept is bounded, and a hostile item costs its capped call, not the block.
      for (const event of events) {
        if (event.eventName !== "RenewalFailed") continue;
        expect((event.args.reason.length - 2) / 2).toBeLessThanOrEqual(256);
      }
      expect(receipt.gasUsed).toBeLessThan(500_000n);
    });

    it("counts a pull as paid only when the token answers nothing (like USDT) or exactly true", async () => {
      const { abi, bytecode } = hostile.NoReturnToken!;
      const token = (await wait(await deployContract(wallet(stranger), { abi, bytecode }))).contractAddress!;
      const tokenCall = async (
        functionName: "mint" | "approve",
        args: readonly [Hex, bigint],
        who = subscriber,
      ) => wait(await writeContract(wallet(who), { address: token, abi, functionName, args }));
      await tokenCall("mint", [subscriber.address, 3n * PRICE]);
      await tokenCall("approve", [manager(), 2n * PRICE]);
      const planReceipt = await wait(
        await createPlan(wallet(provider), {
          manager: manager(),
          token,
          amount: PRICE,
          interval: INTERVAL,
          includedUnits: 0n,
          overageUnitPrice: 0n,
        }),
      );
      const planId = getPlanIdFromReceipt(planReceipt);
      const id = getSubscriptionIdFromReceipt(
        await wait(await subscribe(wallet(subscriber), { manager: manager(), planId, maxOverage: 0n })),
      );
      await devnet.advanceTime(INTERVAL);
      await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: id }));
      expect((await read(id)).status).toBe(SubscriptionStatus.Active);
      const balanceOf = (owner: Hex) =>
        devnet.publicClient.readContract({ address: token, abi, functionName: "balanceOf", args: [owner] });
      expect(await balanceOf(provider.address)).toBe(2n * PRICE);
      // The approval is used up: the token reverts, and the renewal fails alone.
      await devnet.advanceTime(INTERVAL);
      await wait(await collect(wallet(stranger), { manager: manager(), subscriptionId: id }));
      expect((await read(id)).status).toBe(SubscriptionStatus.PastDue);
    });

    it("refuses a collect sent with too little gas for the token call instead of marking the subscriber PastDue", async () => {
      const planId = await newPlan();
      const { id } = await newSubscription(subscriber, planId);
      await devnet.advanceTime(INTERVAL);
      const refused = await devnet.publicClient
        .simulateContract({
          account: stranger.account,
          address: manager(),
          abi: subscriptionManagerAbi,
          functionName: "collect",
          args: [id],
          gas: 100_000n,
        })
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      expect(refused).toBeInstanceOf(BaseError);
      const reverted = (refused as BaseError).walk((e) => e instanceof ContractFunctionRevertedError);
      expect((reverted as ContractFunctionRevertedError | null)?.data?.errorName).toBe(
        "InsufficientGasForPull",
      );
      expect((await read(id)).status).toBe(SubscriptionStatus.Active);
    });

    it("deductAllowanceMany reports an amount that would overflow the cap check and applies the other items", async () => {
      const planId = await newPlan();
      const a = await newSubscription(subscriber, planId, 10_000n);
      const b = await newSubscription(stranger, planId, 10_000n);
      const before = await balance(subscriber.address);
      const receipt = await wait(
        await deductAllowanceMany(wallet(provider), {
          manager: manager(),
          subscriptionIds: [a.id, a.id, b.id],
          amounts: [4_000n, maxUint256 - 1_000n, 3_000n],
          refs: [ref("o1"), ref("o2"), ref("o3")],
        }),
      );
      const events = decodeSubscriptionEvents(receipt.logs);
      expect(events.map((e) => e.eventName)).toEqual([
        "AllowanceDeducted",
        "DeductionFailed",
        "AllowanceDeducted",
      ]);
      expect(events[1]?.args).toMatchObject({
        subscriptionId: a.id,
        reason: DeductionFailure.AllowanceExhausted,
      });
      expect((await read(a.id)).overageUsed).toBe(4_000n);
      expect((await read(b.id)).overageUsed).toBe(3_000n);
      expect(await balance(subscriber.address)).toBe(before - 4_000n);
      // The single form refuses it with the cap's error, not an arithmetic panic.
      const single = await revertOf(
        deductAllowance(wallet(provider), {
          manager: manager(),
          subscriptionId: a.id,
          amount: maxUint256,
          ref: ref("o4"),
        }),
      );
      expect(single.errorName).toBe("AllowanceExhausted");
    });
  });
});
