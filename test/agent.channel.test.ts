/**
 * Paid tools over a prepaid channel on a devnet: the policy opens one channel for a burst of calls and
 * every later call pays by voucher up front; the deposit is a budget hold, each voucher spend against
 * it, and what is left returns to the budget on close. A budget that cannot hold the deposit pays once
 * (or refuses); a second process over the same wallet journal and ledger reuses the channel; a 402
 * whose channel terms differ from the listing is refused before anything is signed.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ToolMessage } from "@langchain/core/messages";
import { Hono } from "hono";
import type { Address } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import type { OfferListing } from "../src/agent/offerCheck.ts";
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { serveApp } from "../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createFacilitatorClient, type FetchFn } from "../src/http/facilitatorClient.ts";
import { CHANNEL_VOUCHER_HEADER } from "../src/protocol/channelVoucher.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { channelRef, createAgentChannels } from "../src/schemes/channel/agent/channelCommitments.ts";
import { createFileChannelWalletStore } from "../src/schemes/channel/client/channelWalletStore.ts";
import { nameChannelOperator, registerTestProvider } from "./support/channelFixtures.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const PRICE = 10_000n; // 0.01 USDC
const HOUR = 3_600;

let devnet: Devnet;
let tf: TestFacilitator;
let payee: DevnetAccount;
let apiKey: string;
const dir = mkdtempSync(join(tmpdir(), "tollgate-agent-channel-"));
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

/** A seller offering one route by channel (and, unless `channelOnly`, once per call at `oneTime`). */
async function startSeller(
  name: string,
  options: { channelPrice?: bigint; oneTime?: bigint; minDeposit?: bigint } = {},
) {
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
    routes: {
      "GET /api/item": {
        pricing: [
          ...(options.oneTime === undefined ? [] : [{ type: "one-time" as const, amount: options.oneTime }]),
          { type: "channel" as const, amount: options.channelPrice ?? PRICE },
        ],
      },
    },
    schemeOptions: {
      channel: {
        contract: devnet.contracts.channels,
        journal: join(dir, `${name}.journal`),
        minDeposit: options.minDeposit ?? 100_000n,
        forwardIntervalMs: 3_600_000,
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
  return { gate, url: `${api.url}/api/item`, stop };
}

const listingOf = (pricing: OfferListing["pricing"]): OfferListing => ({
  seller: payee.address,
  payTo: payee.address,
  network: devnet.network,
  token: devnet.contracts.usd,
  pricing,
  source: "manifest",
});

async function agentOf(name: string, account: DevnetAccount, limits: { total: bigint }, journal?: string) {
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total: limits.total, perCall: 100_000n });
  const store = journal === undefined ? undefined : await createFileChannelWalletStore({ path: journal });
  const channels = createAgentChannels({
    agent: name,
    budget,
    account: account.account,
    network: devnet.network,
    facilitator: createFacilitatorClient({ url: tf.url, fetch }),
    store,
  });
  const payer = createPayer({
    account: account.account,
    network: devnet.network,
    facilitator: tf.url,
    fetch,
  });
  return { budget, channels, payer, store };
}

function toolFor(
  url: string,
  agent: Awaited<ReturnType<typeof agentOf>> & { name: string },
  options: { listing: OfferListing; forecast?: number; fetch?: FetchFn },
) {
  return paidTool(
    { name: "item", description: "An item.", method: "GET", url, input: z.object({}) },
    {
      agent: agent.name,
      payer: agent.payer,
      budget: agent.budget,
      channels: agent.channels,
      listing: options.listing,
      calls: createCallCounter({ clock: systemClock }),
      fetch: options.fetch,
      ...(options.forecast === undefined
        ? {}
        : { forecast: () => ({ calls: options.forecast!, horizonSeconds: HOUR }) }),
    },
  );
}

async function call(tool: ReturnType<typeof paidTool>, i: number) {
  const message = (await tool.invoke({
    id: `c${i}`,
    name: "item",
    args: {},
    type: "tool_call",
  })) as ToolMessage;
  return { text: String(message.content), receipt: message.artifact as PaidToolReceipt };
}

const balance = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > end) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("paid tools over a prepaid channel", () => {
  it("opens one channel for a burst of 12 calls and pays every later call by voucher up front; the ledger is the vouchers' total, the hold is released on close and the wallet moved exactly what the ledger says", async () => {
    const seller = await startSeller("burst", { oneTime: PRICE });
    const account = devnet.accounts[3]!;
    const agent = { name: "burst-agent", ...(await agentOf("burst-agent", account, { total: 1_000_000n })) };
    let exchanges = 0;
    let vouchers = 0;
    const counting: FetchFn = (input, init) => {
      exchanges++;
      const headers = input instanceof Request ? input.headers : new Headers(init?.headers);
      if (headers.has(CHANNEL_VOUCHER_HEADER)) vouchers++;
      return fetch(input, init);
    };
    const tool = toolFor(seller.url, agent, {
      listing: listingOf([
        { type: "one-time", amount: PRICE.toString() },
        { type: "channel", amount: PRICE.toString(), contract: devnet.contracts.channels },
      ]),
      forecast: 20,
      fetch: counting,
    });
    const before = await balance(account.address);

    const first = await call(tool, 0);
    expect(first.text).toContain('"paidWith":"channel"');
    expect(first.receipt).toMatchObject({ mode: "channel", amount: "0.01" });
    expect(first.receipt.reason).toMatch(/prepaid channel.*deposit of 0\.27 USDC/);
    for (let i = 1; i < 12; i++) {
      const { receipt } = await call(tool, i);
      expect(receipt).toMatchObject({ mode: "channel", amount: "0.01" });
    }
    expect(exchanges).toBe(13); // the first call's 402, then one exchange per paid call
    expect(vouchers).toBe(12);
    const channels = agent.channels.wallet.channels();
    expect(channels).toHaveLength(1);
    const [channel] = channels;
    expect(channel).toMatchObject({ status: "open", deposit: 27n * PRICE, signed: 12n * PRICE });
    expect(await balance(account.address)).toBe(before - 27n * PRICE);

    const report = await agent.budget.report(agent.name);
    expect(report.spent.total).toBe(12n * PRICE);
    expect(report.reserved.total).toBe(15n * PRICE); // the rest of the deposit, held
    expect(await agent.budget.getHold(agent.name, channelRef(channel!.channelId))).toMatchObject({
      held: 15n * PRICE,
      charged: 12n * PRICE,
    });

    const settled = await agent.channels.close();
    expect(settled).toEqual([
      {
        channelId: channel!.channelId,
        provider: payee.address,
        deposit: 27n * PRICE,
        spent: 12n * PRICE,
        returned: 15n * PRICE,
      },
    ]);
    const after = await agent.budget.report(agent.name);
    expect(after.spent.total).toBe(12n * PRICE);
    expect(after.reserved.total).toBe(0n);

    // The seller forwards its vouchers, the facilitator claims them, and closes cooperatively.
    await seller.stop();
    await until(
      () =>
        readChannel(devnet.publicClient, {
          channels: devnet.contracts.channels,
          channelId: channel!.channelId,
        }),
      (c) => c.claimed === 12n * PRICE,
    );
    const close = await fetch(`${tf.url}/channels/${channel!.channelId}/close`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}` },
    });
    expect([200, 202]).toContain(close.status);
    await until(
      () =>
        readChannel(devnet.publicClient, {
          channels: devnet.contracts.channels,
          channelId: channel!.channelId,
        }),
      (c) => c.closed,
    );
    expect(await balance(account.address)).toBe(before - after.spent.total);
  }, 120_000);

  it("pays once when the budget cannot hold the gate's minimum deposit, and refuses a channel-only offer with BudgetExceeded before anything is signed", async () => {
    const seller = await startSeller("poor", { oneTime: PRICE, minDeposit: 1_000_000n });
    const account = devnet.accounts[4]!;
    const agent = { name: "poor-agent", ...(await agentOf("poor-agent", account, { total: 500_000n })) };
    const listing = listingOf([
      { type: "one-time", amount: PRICE.toString() },
      { type: "channel", amount: PRICE.toString() },
    ]);
    const tool = toolFor(seller.url, agent, { listing, forecast: 100 });
    const { receipt } = await call(tool, 0);
    expect(receipt).toMatchObject({ mode: "one-time", amount: "0.01" });
    expect(receipt.reason).toMatch(
      /a channel needs a deposit of at least 1 USDC, above the .* total limit leaves/,
    );
    expect(agent.channels.wallet.channels()).toEqual([]);

    const channelOnly = await startSeller("poor-only", { minDeposit: 1_000_000n });
    const onlyTool = toolFor(channelOnly.url, agent, {
      listing: listingOf([{ type: "channel", amount: PRICE.toString() }]),
      forecast: 100,
    });
    const refused = await call(onlyTool, 1);
    expect(refused.receipt).toMatchObject({ error: { code: "BudgetExceeded" }, paid: false });
    expect(agent.channels.wallet.channels()).toEqual([]);
    expect((await agent.budget.report(agent.name)).spent.total).toBe(PRICE);
  }, 120_000);

  it("a second process over the same wallet journal and ledger reuses the open channel and never signs a lower total", async () => {
    const seller = await startSeller("reuse", { oneTime: PRICE });
    const account = devnet.accounts[5]!;
    const journal = join(dir, "agent-wallet.journal");
    const listing = listingOf([
      { type: "one-time", amount: PRICE.toString() },
      { type: "channel", amount: PRICE.toString() },
    ]);
    const one = {
      name: "reuse-agent",
      ...(await agentOf("reuse-agent", account, { total: 1_000_000n }, journal)),
    };
    const tool1 = toolFor(seller.url, one, { listing, forecast: 30 });
    for (let i = 0; i < 3; i++) expect((await call(tool1, i)).receipt.mode).toBe("channel");
    const [opened] = one.channels.wallet.channels();
    expect(opened).toMatchObject({ status: "open", signed: 3n * PRICE, deposit: 40n * PRICE });
    await one.store!.close();

    const two = {
      name: "reuse-agent",
      ...(await agentOf("reuse-agent", account, { total: 1_000_000n }, journal)),
    };
    const tool2 = toolFor(seller.url, two, { listing, forecast: 30 });
    for (let i = 0; i < 3; i++) expect((await call(tool2, i)).receipt.mode).toBe("channel");
    expect(two.channels.wallet.channels()).toEqual([
      expect.objectContaining({ channelId: opened!.channelId, signed: 6n * PRICE }),
    ]);
    const report = await two.budget.report("reuse-agent");
    expect(report.spent.total).toBe(6n * PRICE);
    expect(report.reserved.total).toBe(34n * PRICE);
    const settled = await two.channels.close();
    expect(settled).toMatchObject([{ spent: 6n * PRICE, returned: 34n * PRICE }]);
    await two.store!.close();
  }, 120_000);

  it("refuses a 402 whose channel price or contract differs from the listing before anything is signed", async () => {
    const seller = await startSeller("dear", { channelPrice: 2n * PRICE });
    const account = devnet.accounts[6]!;
    const agent = { name: "wary-agent", ...(await agentOf("wary-agent", account, { total: 1_000_000n })) };
    const dear = await call(
      toolFor(seller.url, agent, {
        listing: listingOf([{ type: "channel", amount: PRICE.toString() }]),
        forecast: 50,
      }),
      0,
    );
    expect(dear.receipt).toMatchObject({ error: { code: "OfferMismatch" }, paid: false });
    expect(dear.text).toMatch(/asks price 0\.02 USDC per call.*says 0\.01 USDC per call/);

    const elsewhere = await call(
      toolFor(seller.url, agent, {
        listing: listingOf([
          { type: "channel", amount: (2n * PRICE).toString(), contract: devnet.contracts.usd },
        ]),
        forecast: 50,
      }),
      1,
    );
    expect(elsewhere.receipt).toMatchObject({ error: { code: "OfferMismatch" }, paid: false });
    expect(elsewhere.text).toMatch(/channel contract/);
    expect(agent.channels.wallet.channels()).toEqual([]);
    const report = await agent.budget.report(agent.name);
    expect(report.spent.total).toBe(0n);
    expect(report.reserved.total).toBe(0n);
  }, 60_000);
});
