import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { Address, Hex } from "viem";
import { describe, expect, it } from "vitest";
import { honoPaymentGate, type PaymentGateEnv } from "../../gate/honoPaymentGate.ts";
import { paymentGate } from "../../gate/paymentGate.ts";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import {
  CHANNEL_VOUCHER_HEADER,
  ChannelTermsSchema,
  encodeChannelVoucher,
} from "../../protocol/channelVoucher.ts";
import { createFixedClock } from "../../protocol/clock.ts";
import { PaymentRequiredSchema } from "../../protocol/paymentRequired.ts";
import { CHANNEL_RECEIPT_HEADER } from "./channelHeaders.ts";
import { toChannelState } from "./channelState.ts";
import { createSessionKey, createVoucherSigner } from "./client/sessionKey.ts";
import { createMemoryVoucherStore } from "./gate/voucherStore.ts";
import type { ChannelPayment } from "./gate.ts";

const NETWORK = "eip155:31337";
const TOKEN: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const PAY_TO: Address = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const PAYER: Address = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const CONTRACT: Address = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512";
const PRICE = 10_000n;
/** The gate's store tag: the test channel was opened for it. */
const TAG: Hex = "0x0000000000000a7e";

const noNetwork: FetchFn = async (input) => {
  throw new Error(`unexpected fetch of ${String(input)}`);
};

function setup(lookups?: Record<string, unknown>) {
  const key = createSessionKey();
  const channelId = `0x${randomBytes(32).toString("hex")}` as Hex;
  const state = toChannelState({
    channelId,
    payer: PAYER,
    payee: PAY_TO,
    token: TOKEN,
    deposit: 100n * PRICE,
    claimed: 0n,
    sessionKeyX: key.x,
    sessionKeyY: key.y,
    closeDelay: 3_600,
    closeRequestedAt: 0,
    closed: false,
    tag: TAG,
  })!;
  const store = createMemoryVoucherStore({ tag: TAG });
  const gate = paymentGate({
    payTo: PAY_TO,
    network: NETWORK,
    token: { address: TOKEN, name: "USD Coin", version: "2" },
    facilitator: "http://facilitator.test",
    fetch: noNetwork,
    memoSecret: "a-test-memo-secret-that-is-at-least-32-bytes-long",
    clock: createFixedClock(1_800_000_000_000),
    routes: {
      "GET /api/item": {
        pricing: [
          { type: "channel", amount: PRICE },
          { type: "one-time", amount: PRICE },
        ],
      },
      "GET /api/once": { amount: PRICE },
    },
    schemeOptions: {
      channel: {
        contract: CONTRACT,
        store,
        source: { get: async (id: Hex) => (id === channelId ? state : undefined) },
        minDeposit: 50n * PRICE,
        ...(lookups === undefined ? {} : { lookups }),
      },
    },
  });
  const served: unknown[] = [];
  const script: ContentfulStatusCode[] = [];
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.get("/api/*", (c) => {
    served.push(c.get("payment"));
    return c.json({ ok: true }, script.shift() ?? 200);
  });
  const signer = createVoucherSigner(key, { chainId: 31337, channels: CONTRACT }, channelId);
  const get = (path: string, voucher?: string) =>
    app.request(path, voucher === undefined ? {} : { headers: { [CHANNEL_VOUCHER_HEADER]: voucher } });
  return { gate, app, store, served, script, signer, channelId, get };
}

describe("channel scheme at the gate", () => {
  it("reads unknown channel ids within each client address's share (lookups.perClient), by the address the host gave", async () => {
    const { gate } = setup({ perClient: { burst: 1, perSecond: 0.001, queue: 0 } });
    const madeUp = () =>
      encodeChannelVoucher({
        channelId: `0x${randomBytes(32).toString("hex")}` as Hex,
        cumulativeAmount: PRICE,
        signature: new Uint8Array(randomBytes(64)),
      });
    const status = async (remoteAddress: string | undefined) => {
      const result = await gate({
        method: "GET",
        url: "/api/item",
        headers: new Headers({ [CHANNEL_VOUCHER_HEADER]: madeUp() }),
        remoteAddress,
      });
      return result.kind === "respond" ? result.response.status : 200;
    };
    expect(await status("127.0.0.2")).toBe(402);
    expect(await status("::ffff:127.0.0.2")).toBe(429);
    expect(await status("127.0.0.3")).toBe(402);
    // No address: the gate-wide limits only.
    expect(await status(undefined)).toBe(402);
    expect(await status(undefined)).toBe(402);
    expect(() => setup({ perClient: { burst: 0 } })).toThrow(/perClient/);
  });

  it("offers a channel option with the contract, facilitator, minimum and suggested deposit and its store's tag", async () => {
    const { get } = setup();
    const response = await get("/api/item");
    expect(response.status).toBe(402);
    const body = PaymentRequiredSchema.parse(await response.json());
    const option = body.accepts.find((o) => o.scheme === "channel");
    expect(option).toMatchObject({ amount: "10000", payTo: PAY_TO, token: TOKEN, network: NETWORK });
    expect(ChannelTermsSchema.parse(option?.extra)).toEqual({
      contract: CONTRACT,
      facilitator: "http://facilitator.test",
      minDeposit: "500000",
      suggestedDeposit: "10000000",
      minCloseDelay: 3_600,
      tag: TAG,
    });
    expect(body.accepts.map((o) => o.scheme)).toContain("exact");
  });

  it("offers the TollgateChannels contract the facilitator's /supported lists when none is configured, and says so when it lists none", async () => {
    const gateOn = (network: `eip155:${number}`) => {
      const supported = {
        version: "1",
        schemes: ["exact"],
        networks: [
          {
            network: "eip155:84532",
            tokens: [{ address: TOKEN, symbol: "USDC", decimals: 6, eip712: { name: "USDC", version: "2" } }],
            batchSettler: CONTRACT,
            channels: CONTRACT,
            signers: [],
          },
        ],
      };
      const fetchSupported: FetchFn = async (input) =>
        String(input).endsWith("/supported") ? Response.json(supported) : noNetwork(input);
      const gate = paymentGate({
        payTo: PAY_TO,
        network,
        token: TOKEN,
        facilitator: "http://facilitator.test",
        fetch: fetchSupported,
        memoSecret: "a-test-memo-secret-that-is-at-least-32-bytes-long",
        routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
        schemeOptions: { channel: { store: createMemoryVoucherStore({ tag: TAG }) } },
      });
      const app = new Hono<PaymentGateEnv>();
      app.use("/api/*", honoPaymentGate(gate));
      app.get("/api/*", (c) => c.json({ ok: true }));
      return app;
    };
    const response = await gateOn("eip155:84532").request("/api/item");
    expect(response.status).toBe(402);
    const option = PaymentRequiredSchema.parse(await response.json()).accepts[0];
    expect(ChannelTermsSchema.parse(option?.extra).contract).toBe(CONTRACT);

    const unlisted = await gateOn("eip155:8453").request("/api/item");
    expect(unlisted.status).toBe(500);
    expect(JSON.stringify(await unlisted.json())).not.toContain("TollgateChannels");
  });

  it("serves a request paying with a voucher, with the payment and a receipt, after persisting it", async () => {
    const { get, served, store, signer, channelId } = setup();
    const response = await get("/api/item", signer.header(PRICE));
    expect(response.status).toBe(200);
    expect(response.headers.get(CHANNEL_RECEIPT_HEADER)).toBe(`${channelId}.10000.10000`);
    expect(served[0]).toMatchObject({
      scheme: "channel",
      payer: PAYER,
      amount: PRICE,
      channelId,
      cumulativeAmount: PRICE,
    } satisfies Partial<ChannelPayment>);
    expect(await store.tally(channelId)).toEqual({ highest: PRICE, spent: PRICE });
  });

  it("answers a replayed voucher with 402 ChannelVoucherStale and the tally in the receipt", async () => {
    const { get, signer, channelId, served } = setup();
    const voucher = signer.header(PRICE);
    expect((await get("/api/item", voucher)).status).toBe(200);
    const replay = await get("/api/item", voucher);
    expect(replay.status).toBe(402);
    expect(await replay.json()).toMatchObject({ error: "ChannelVoucherStale" });
    expect(replay.headers.get(CHANNEL_RECEIPT_HEADER)).toBe(`${channelId}.10000.10000`);
    expect(served).toHaveLength(1);
  });

  it.each([
    ["a malformed header", () => "not-a-voucher", "ChannelVoucherInvalid"],
    ["an unknown channel", () => `0x${"11".repeat(32)}.10000.${"A".repeat(86)}`, "ChannelVoucherInvalid"],
  ])("answers %s with 402 %s, never 500", async (_, voucher, code) => {
    const { get, served } = setup();
    const response = await get("/api/item", voucher());
    expect(response.status).toBe(402);
    expect(await response.json()).toMatchObject({ error: code });
    expect(served).toHaveLength(0);
  });

  it("answers a voucher above the deposit with 402 ChannelDepositExhausted", async () => {
    const { get, signer } = setup();
    const response = await get("/api/item", signer.header(101n * PRICE));
    expect(response.status).toBe(402);
    expect(await response.json()).toMatchObject({ error: "ChannelDepositExhausted" });
  });

  it("does not take a voucher on a route not sold by channel", async () => {
    const { get, signer, served } = setup();
    const response = await get("/api/once", signer.header(PRICE));
    expect(response.status).toBe(402);
    expect(served).toHaveLength(0);
  });

  it("gives the price back as credit when the handler answers 5xx, so the same voucher pays a retry", async () => {
    const { get, signer, script, store, channelId, served } = setup();
    script.push(503);
    const voucher = signer.header(PRICE);
    expect((await get("/api/item", voucher)).status).toBe(503);
    expect(await store.tally(channelId)).toEqual({ highest: PRICE, spent: 0n });
    expect((await get("/api/item", voucher)).status).toBe(200);
    expect(served).toHaveLength(2);
  });
});
