/**
 * A seller must not lock a buyer's deposit for as long as it likes (docs/security.md, "The second review"). The close delay a channel is opened with is how long a vanished seller keeps the deposit
 * after the payer asked to close; the gate's 402 names its minimum, up to the contract's 30 days. The
 * payer holds it to its own bound (`maxCloseDelay`, default one day): the wallet refuses to open above
 * it before signing anything, and an agent's offer check refuses such an offer (or pays the seller
 * another way), naming the seller's delay and the agent's bound.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ToolMessage } from "@langchain/core/messages";
import { Hono } from "hono";
import type { Hex } from "viem";
import { generatePrivateKey } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createBudgetLedger } from "../../src/agent/budget/createBudgetLedger.ts";
import { channelCloseDelayRefusal, type OfferListing } from "../../src/agent/offerCheck.ts";
import { type PaidToolReceipt, paidTool } from "../../src/agent/paidTool.ts";
import { createCallCounter } from "../../src/agent/policy/createCallCounter.ts";
import { privateKeyAccount } from "../../src/chain/signers/privateKeyAccount.ts";
import type { TypedDataSigner } from "../../src/chain/signers/typedDataSigner.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer } from "../../src/client/createPayer.ts";
import { serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";
import { createFacilitatorClient, type FetchFn } from "../../src/http/facilitatorClient.ts";
import { systemClock } from "../../src/protocol/clock.ts";
import { isTollgateError } from "../../src/protocol/errors.ts";
import type { PaymentOption } from "../../src/protocol/paymentRequired.ts";
import { createAgentChannels } from "../../src/schemes/channel/agent/channelCommitments.ts";
import {
  type ChannelTermsInput,
  createChannelWallet,
  DEFAULT_MAX_CHANNEL_CLOSE_DELAY,
} from "../../src/schemes/channel/client/channelWallet.ts";
import { startTestFacilitator, type TestFacilitator } from "../support/facilitatorHarness.ts";

const PRICE = 10_000n;
const DAY = 86_400;
const THIRTY_DAYS = 30 * DAY;

describe("the payer's bound on a channel's close delay", () => {
  /** A signer that counts what it signs, and a facilitator that records what reaches it. */
  function offline() {
    const account = privateKeyAccount(generatePrivateKey());
    const signed: unknown[] = [];
    const signer: TypedDataSigner = {
      address: account.address,
      signTypedData: (parameters) => {
        signed.push(parameters);
        return account.signTypedData(parameters);
      },
    };
    const requests: string[] = [];
    const fetchFn: FetchFn = async (input, init) => {
      requests.push(`${init?.method ?? "GET"} ${String(input)}`);
      return new Response(JSON.stringify({ error: "Internal", message: "not here" }), { status: 500 });
    };
    return {
      signer,
      signed,
      requests,
      facilitator: createFacilitatorClient({ url: "http://f.test", fetch: fetchFn }),
    };
  }

  const terms = (minCloseDelay: number): ChannelTermsInput => ({
    network: "eip155:31337",
    contract: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
    facilitator: "http://f.test",
    payee: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    token: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
    price: PRICE,
    minDeposit: PRICE,
    minCloseDelay,
    tag: "0x0000000000000a7e" as Hex,
  });
  const tokenDomain = async () => ({ name: "USD Coin", version: "2" });

  it("refuses, before signing or sending anything, a gate asking a close delay above the default bound of one day", async () => {
    const { signer, signed, requests, facilitator } = offline();
    const wallet = createChannelWallet({
      account: signer,
      network: "eip155:31337",
      facilitator,
      tokenDomain,
    });
    expect(DEFAULT_MAX_CHANNEL_CLOSE_DELAY).toBe(DAY);
    const refusal = await wallet.pay(terms(THIRTY_DAYS)).catch((error: unknown) => error);
    expect(isTollgateError(refusal, "OfferMismatch")).toBe(true);
    expect(refusal).toMatchObject({
      message: expect.stringMatching(/close delay of at least 2592000 s, above the payer's bound of 86400 s/),
      details: { field: "closeDelay", asked: String(THIRTY_DAYS), bound: String(DAY) },
    });
    expect(signed).toHaveLength(0);
    expect(requests).toHaveLength(0);
    expect(wallet.channels()).toEqual([]);
  });

  it("opens at the seller's delay when it is within the payer's configured bound", async () => {
    const { signer, signed, requests, facilitator } = offline();
    const wallet = createChannelWallet({
      account: signer,
      network: "eip155:31337",
      facilitator,
      tokenDomain,
      maxCloseDelay: THIRTY_DAYS,
    });
    // Signed and sent (this facilitator then fails it): the bound let it through.
    await expect(wallet.pay(terms(THIRTY_DAYS))).rejects.toThrow();
    expect(signed).toHaveLength(1);
    expect(requests).toEqual(["POST http://f.test/channels"]);
  });

  it("holds a 402's channel option to the agent's bound in the offer check", () => {
    const option = {
      scheme: "channel",
      network: "eip155:31337",
      token: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
      amount: PRICE.toString(),
      payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      extra: {
        contract: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        facilitator: "http://f.test",
        minDeposit: PRICE.toString(),
        suggestedDeposit: (100n * PRICE).toString(),
        minCloseDelay: THIRTY_DAYS,
      },
    } as unknown as PaymentOption;
    expect(channelCloseDelayRefusal(option, DAY, "item")).toMatchObject({
      code: "OfferMismatch",
      message: expect.stringMatching(/^item: .*2592000 s.*86400 s/),
      details: { tool: "item", field: "closeDelay", asked: String(THIRTY_DAYS), bound: String(DAY) },
    });
    expect(channelCloseDelayRefusal(option, THIRTY_DAYS, "item")).toBeUndefined();
  });
});

describe("an agent facing a seller that asks a 30-day close delay", { timeout: 120_000 }, () => {
  let devnet: Devnet;
  let tf: TestFacilitator;
  let payee: DevnetAccount;
  const dir = mkdtempSync(join(tmpdir(), "tollgate-close-delay-bound-"));
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    tf = await startTestFacilitator(devnet);
    payee = devnet.accounts[2]!;
  }, 60_000);
  afterAll(async () => {
    for (const close of closers.reverse()) await close().catch(() => undefined);
    await tf?.stop();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function startSeller(name: string, oneTime: boolean) {
    const gate = paymentGate({
      payTo: payee.address,
      network: devnet.network,
      token: {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
      },
      facilitator: tf.url,
      memoSecret: "a-close-delay-bound-memo-secret-of-32-bytes",
      routes: {
        "GET /api/item": {
          pricing: [
            ...(oneTime ? [{ type: "one-time" as const, amount: PRICE }] : []),
            { type: "channel" as const, amount: PRICE },
          ],
        },
      },
      schemeOptions: {
        channel: {
          contract: devnet.contracts.channels,
          journal: join(dir, `${name}.journal`),
          minCloseDelay: THIRTY_DAYS,
        },
      },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => c.json({ item: 1 }));
    const api = await serveApp(app);
    closers.push(async () => {
      await api.close();
      await gate.close();
    });
    return `${api.url}/api/item`;
  }

  async function callAs(name: string, account: DevnetAccount, url: string, oneTime: boolean) {
    const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await budget.setLimits(name, { total: 5_000_000n, perCall: 100_000n });
    const channels = createAgentChannels({
      agent: name,
      budget,
      account: account.account,
      network: devnet.network,
      facilitator: createFacilitatorClient({ url: tf.url, fetch }),
    });
    const listing: OfferListing = {
      seller: payee.address,
      payTo: payee.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      pricing: [
        ...(oneTime ? [{ type: "one-time" as const, amount: PRICE.toString() }] : []),
        { type: "channel" as const, amount: PRICE.toString() },
      ],
      source: "manifest",
    };
    const tool = paidTool(
      { name: "item", description: "An item.", method: "GET", url, input: z.object({}) },
      {
        agent: name,
        payer: createPayer({ account: account.account, network: devnet.network, facilitator: tf.url, fetch }),
        budget,
        channels,
        listing,
        calls: createCallCounter({ clock: systemClock }),
        forecast: () => ({ calls: 100, horizonSeconds: 3_600 }),
      },
    );
    const message = (await tool.invoke({
      id: "c0",
      name: "item",
      args: {},
      type: "tool_call",
    })) as ToolMessage;
    return { text: String(message.content), receipt: message.artifact as PaidToolReceipt, budget, channels };
  }

  it("refuses a channel-only offer naming the seller's delay and its bound, holding and signing nothing", async () => {
    const url = await startSeller("channel-only", false);
    const { text, receipt, budget, channels } = await callAs(
      "bounded-agent",
      devnet.accounts[1]!,
      url,
      false,
    );
    expect(receipt).toMatchObject({ error: { code: "OfferMismatch" }, paid: false });
    expect(text).toMatch(/close delay of at least 2592000 s, above the payer's bound of 86400 s/);
    expect(channels.wallet.channels()).toEqual([]);
    const report = await budget.report("bounded-agent");
    expect(report.spent.total).toBe(0n);
    expect(report.reserved.total).toBe(0n);
  });

  it("pays a seller that also sells once per call that way instead of opening its channel", async () => {
    const url = await startSeller("with-one-time", true);
    const { receipt, channels } = await callAs("bounded-agent-2", devnet.accounts[3]!, url, true);
    expect(receipt).toMatchObject({ mode: "one-time", amount: "0.01" });
    expect(receipt.error).toBeUndefined();
    expect(channels.wallet.channels()).toEqual([]);
  });
});
