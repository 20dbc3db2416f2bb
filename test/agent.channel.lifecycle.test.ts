/**
 * A prepaid channel's life after the open, for an agent on a devnet: a channel running low is topped
 * up through the facilitator (gasless, a budget commitment) instead of replaced, so a long burst runs
 * on one channel; an idle channel is closed by the idle rule (its hold released at once), the seller's
 * vouchers are claimed, and the unspent deposit returns to the wallet once the close delay is over —
 * the ledger then equals what the wallet moved.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ToolMessage } from "@langchain/core/messages";
import { Hono } from "hono";
import type { Address, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import type { OfferListing } from "../src/agent/offerCheck.ts";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { channelRef, createAgentChannels } from "../src/schemes/channel/agent/channelCommitments.ts";
import { nameChannelOperator, registerTestProvider } from "./support/channelFixtures.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const PRICE = 10_000n; // 0.01 USDC
const HOUR = 3_600;
const CLOSE_DELAY = 3_600; // TollgateChannels.MIN_CLOSE_DELAY

let devnet: Devnet;
let tf: TestFacilitator;
let payee: DevnetAccount;
let apiKey: string;
const dir = mkdtempSync(join(tmpdir(), "tollgate-agent-channel-life-"));
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 8 });
  tf = await startTestFacilitator(devnet);
  payee = devnet.accounts[2]!;
  apiKey = await registerTestProvider(tf.url, payee);
  const gas = devnet.accounts[devnet.accounts.length - 1]!;
  await nameChannelOperator(devnet, payee, gas.address);
}, 60_000);

afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
  await tf?.stop();
  await devnet?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function startSeller(name: string) {
  const gate = paymentGate({
    payTo: payee.address,
    network: devnet.network,
    token: {
      address: devnet.contracts.usd,
      name: devnet.token.name,
      version: devnet.token.version,
    },
    facilitator: tf.url,
    providerApiKey: apiKey,
    memoSecret: "an-agent-channel-memo-secret-of-at-least-32-bytes",
    routes: { "GET /api/item": { pricing: [{ type: "channel" as const, amount: PRICE }] } },
    schemeOptions: {
      channel: {
        contract: devnet.contracts.channels,
        journal: join(dir, `${name}.journal`),
        minDeposit: 100_000n,
        minCloseDelay: CLOSE_DELAY,
        closeMarginSeconds: 10,
        forwardIntervalMs: 200,
      },
    },
  });
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.get("/api/item", (c) => c.json({ item: 1, paidWith: c.get("payment")?.scheme }));
  const api = await serveApp(app);
  const stop = async () => {
    await api.close();
    await gate.close();
  };
  closers.push(stop);
  return { url: `${api.url}/api/item`, stop };
}

async function agentOf(name: string, account: DevnetAccount, forecast: number, url: string) {
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total: 5_000_000n, perCall: 100_000n });
  const facilitator = createFacilitatorClient({ url: tf.url, fetch });
  const channels = createAgentChannels({
    agent: name,
    budget,
    account: account.account,
    network: devnet.network,
    facilitator,
    closeDelay: CLOSE_DELAY,
  });
  const payer = createPayer({
    account: account.account,
    network: devnet.network,
    facilitator: tf.url,
    fetch,
  });
  const listing: OfferListing = {
    seller: payee.address,
    payTo: payee.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    pricing: [{ type: "channel", amount: PRICE.toString(), contract: devnet.contracts.channels }],
    source: "manifest",
  };
  const tool = paidTool(
    { name: "item", description: "An item.", method: "GET", url, input: z.object({}) },
    {
      agent: name,
      payer,
      budget,
      channels,
      listing,
      calls: createCallCounter({ clock: systemClock }),
      forecast: () => ({ calls: forecast, horizonSeconds: HOUR }),
    },
  );
  let n = 0;
  const call = async () => {
    const message = (await tool.invoke({
      id: `c${n++}`,
      name: "item",
      args: {},
      type: "tool_call",
    })) as ToolMessage;
    return { text: String(message.content), receipt: message.artifact as PaidToolReceipt };
  };
  return { budget, channels, call };
}

const balance = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
const chainChannel = (channelId: Hex) =>
  readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > end) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("an agent's channel after the open", { timeout: 120_000 }, () => {
  it("tops a channel running low up through the facilitator instead of opening another: 40 calls on one channel, every top-up held in the budget; an orchestrator's run end closes it once idle", async () => {
    const seller = await startSeller("topup");
    const account = devnet.accounts[3]!;
    const agent = await agentOf("topup-agent", account, 6, seller.url);
    const before = await balance(account.address);
    for (let i = 0; i < 40; i++) {
      const { text, receipt } = await agent.call();
      expect(text).toContain('"paidWith":"channel"');
      expect(receipt).toMatchObject({ mode: "channel", amount: "0.01" });
    }
    const channels = agent.channels.wallet.channels();
    expect(channels).toHaveLength(1);
    const [channel] = channels;
    // A top-up started by the last calls may still be on its way (its hold already grown): wait until
    // wallet, chain and budget agree.
    const moved = await until(
      async () => ({
        deposit: (await chainChannel(channel!.channelId)).deposit,
        paid: before - (await balance(account.address)),
        wallet: agent.channels.wallet.channels()[0]?.deposit,
        held: (await agent.budget.getHold("topup-agent", channelRef(channel!.channelId)))?.held,
      }),
      (m) => m.deposit === m.paid && m.wallet === m.deposit && m.held === m.deposit - 40n * PRICE,
    );
    const onChain = { deposit: moved.deposit };
    // The policy sized the deposit at the gate's minimum (6 calls forecast × 4/3 < 10 calls); each
    // top-up repeats it, in the background, once a quarter is left.
    expect(onChain.deposit % 100_000n).toBe(0n);
    expect(onChain.deposit).toBeGreaterThanOrEqual(40n * PRICE);
    expect(moved).toEqual({
      deposit: onChain.deposit,
      paid: onChain.deposit,
      wallet: onChain.deposit,
      held: onChain.deposit - 40n * PRICE,
    });
    expect(agent.channels.wallet.channels()[0]).toMatchObject({ status: "open", signed: 40n * PRICE });
    const hold = await agent.budget.getHold("topup-agent", channelRef(channel!.channelId));
    expect(hold).toMatchObject({ held: onChain.deposit - 40n * PRICE, charged: 40n * PRICE });

    // An orchestrator's run end applies the idle rule: a channel used just now stays open for the
    // runs that follow; one idle longer than `channelIdleSeconds` is closed and its hold released.
    await createOrchestrator({ tools: [], model: "rules", channels: agent.channels }).run("anything");
    expect(agent.channels.wallet.channels()[0]?.status).toBe("open");
    await createOrchestrator({
      tools: [],
      model: "rules",
      channels: agent.channels,
      channelIdleSeconds: 0,
    }).run("anything");
    expect(agent.channels.wallet.channels()[0]?.status).toBe("closing");
    expect(await agent.budget.getHold("topup-agent", channelRef(channel!.channelId))).toMatchObject({
      held: 0n,
      charged: 40n * PRICE,
    });
    expect((await chainChannel(channel!.channelId)).closeRequestedAt).toBeGreaterThan(0n);
    await seller.stop();
  });

  it("closes an idle channel (the hold released at once) and returns the unspent deposit to the wallet after the close delay: the ledger equals the wallet's movements", async () => {
    const seller = await startSeller("idle");
    const account = devnet.accounts[4]!;
    const agent = await agentOf("idle-agent", account, 20, seller.url);
    const before = await balance(account.address);
    for (let i = 0; i < 10; i++) await agent.call();
    const [channel] = agent.channels.wallet.channels();
    expect(channel).toMatchObject({ status: "open", deposit: 27n * PRICE, signed: 10n * PRICE });

    // Used just now: not idle. Idle but kept (a forecast of more calls soon): still open.
    expect(await agent.channels.closeIdle({ idleSeconds: 600 })).toEqual([]);
    expect(await agent.channels.closeIdle({ idleSeconds: 0, keep: () => true })).toEqual([]);
    expect(agent.channels.wallet.channels()[0]?.status).toBe("open");

    const settled = await agent.channels.closeIdle({ idleSeconds: 0 });
    expect(settled).toEqual([
      {
        channelId: channel!.channelId,
        provider: payee.address,
        deposit: 27n * PRICE,
        spent: 10n * PRICE,
        returned: 17n * PRICE,
      },
    ]);
    const report = await agent.budget.report("idle-agent");
    expect([report.spent.total, report.reserved.total]).toEqual([10n * PRICE, 0n]);

    // The gate sees the close request and forwards; the facilitator claims at once.
    const claimed = await until(
      () => chainChannel(channel!.channelId),
      (c) => c.claimed === 10n * PRICE,
    );
    expect(claimed).toMatchObject({ claimed: 10n * PRICE, closed: false });
    expect(await agent.channels.withdrawDue()).toEqual([]); // still in its close delay
    await devnet.advanceTime(CLOSE_DELAY + 1);
    const withdrawn = await until(
      () => agent.channels.withdrawDue(),
      (w) => w.length > 0,
    );
    expect(withdrawn).toEqual([
      { channelId: channel!.channelId, claimed: 10n * PRICE, refunded: 17n * PRICE },
    ]);
    expect(await chainChannel(channel!.channelId)).toMatchObject({ closed: true });
    expect(agent.channels.wallet.channels()).toEqual([]);
    // What left the wallet is exactly what the ledger says was spent.
    const after = await agent.budget.report("idle-agent");
    expect(before - (await balance(account.address))).toBe(after.spent.total);
    expect(after.reserved.total).toBe(0n);
    await seller.stop();
  });
});
