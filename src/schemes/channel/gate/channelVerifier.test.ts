import { randomBytes } from "node:crypto";
import type { Address, Hex } from "viem";
import { describe, expect, it } from "vitest";
import { CHANNEL_VOUCHER_HEADER } from "../../../protocol/channelVoucher.ts";
import { createFixedClock } from "../../../protocol/clock.ts";
import { type ChannelState, type ChannelStateSource, toChannelState } from "../channelState.ts";
import { createSessionKey, createVoucherSigner, type SessionKey } from "../client/sessionKey.ts";
import { type ChannelCharge, type ChannelVerifierOptions, createChannelVerifier } from "./channelVerifier.ts";
import { createMemoryVoucherStore, type VoucherStore } from "./voucherStore.ts";

const chainId = 31337;
const channels: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const payTo: Address = "0x00000000000000000000000000000000000070A1";
const token: Address = "0x0000000000000000000000000000000000000dC1";
const payer: Address = "0x00000000000000000000000000000000000000A1";
const PRICE = 1_000n;
/** The gate's store tag; test channels are opened for it unless they say otherwise. */
const TAG: Hex = "0x00000000000007a6";
const NOW = 1_800_000_000_000;

type TestChannel = { id: Hex; key: SessionKey; state: ChannelState; voucher(cumulative: bigint): string };

function testChannel(
  overrides: Partial<Omit<ChannelState, "sessionKey">> = {},
  key = createSessionKey(),
): TestChannel {
  const id = `0x${randomBytes(32).toString("hex")}` as Hex;
  const state = toChannelState({
    channelId: id,
    payer,
    payee: payTo,
    token,
    deposit: 100_000n,
    claimed: 0n,
    sessionKeyX: key.x,
    sessionKeyY: key.y,
    closeDelay: 3_600,
    closeRequestedAt: 0,
    closed: false,
    tag: TAG,
    ...overrides,
  })!;
  const signer = createVoucherSigner(key, { chainId, channels }, id);
  return { id, key, state, voucher: (c) => signer.header(c) };
}

/** A channel source over a mutable map that counts its reads. */
function sourceOf(...list: TestChannel[]) {
  const states = new Map(list.map((c) => [c.id, c.state]));
  const reads: Hex[] = [];
  const source: ChannelStateSource = {
    async get(channelId) {
      reads.push(channelId);
      return states.get(channelId);
    },
  };
  return { source, states, reads };
}

function setup(
  list: TestChannel[],
  store: VoucherStore = createMemoryVoucherStore(),
  extra: Partial<ChannelVerifierOptions> = {},
) {
  const clock = createFixedClock(NOW);
  const src = sourceOf(...list);
  const closing: Hex[] = [];
  const verifier = createChannelVerifier({
    chainId,
    channels,
    payTo,
    token,
    source: src.source,
    store,
    tag: TAG,
    clock,
    onClosing: (id) => closing.push(id),
    ...extra,
  });
  return { verifier, store, clock, closing, ...src };
}

describe("channel verifier", () => {
  it("charges a voucher that covers the price and has persisted the tally when it resolves", async () => {
    const ch = testChannel();
    const { verifier, store } = setup([ch]);
    const result = await verifier.charge(ch.voucher(PRICE), PRICE);
    expect(result).toMatchObject({
      ok: true,
      channelId: ch.id,
      payer,
      cumulativeAmount: PRICE,
      price: PRICE,
    });
    expect(await store.tally(ch.id)).toEqual({ highest: PRICE, spent: PRICE });
    const second = await verifier.charge(ch.voucher(2n * PRICE), PRICE);
    expect(second).toMatchObject({ ok: true, tally: { highest: 2n * PRICE, spent: 2n * PRICE } });
  });

  it("reads a channel from the source once and answers later vouchers from the cache", async () => {
    const ch = testChannel();
    const { verifier, reads } = setup([ch]);
    for (let i = 1n; i <= 5n; i++)
      expect((await verifier.charge(ch.voucher(i * PRICE), PRICE)).ok).toBe(true);
    expect(reads).toEqual([ch.id]);
  });

  it("refuses a replayed voucher as stale, with the channel's highest and spent", async () => {
    const ch = testChannel();
    const { verifier } = setup([ch]);
    const header = ch.voucher(PRICE);
    expect((await verifier.charge(header, PRICE)).ok).toBe(true);
    expect(await verifier.charge(header, PRICE)).toEqual({
      ok: false,
      error: "ChannelVoucherStale",
      message: expect.stringContaining("does not cover"),
      details: { highest: "1000", spent: "1000", price: "1000" },
    });
  });

  it("refuses a lower or equal cumulative amount and one that rises by less than the price", async () => {
    const ch = testChannel();
    const { verifier } = setup([ch]);
    expect((await verifier.charge(ch.voucher(3n * PRICE), PRICE)).ok).toBe(true);
    expect((await verifier.charge(ch.voucher(3n * PRICE), PRICE)).ok).toBe(true); // credit of 2 × price
    expect((await verifier.charge(ch.voucher(3n * PRICE), PRICE)).ok).toBe(true);
    for (const c of [PRICE, 3n * PRICE, 4n * PRICE - 1n]) {
      expect(await verifier.charge(ch.voucher(c), PRICE)).toMatchObject({
        ok: false,
        error: "ChannelVoucherStale",
      });
    }
    expect((await verifier.charge(ch.voucher(4n * PRICE), PRICE)).ok).toBe(true);
  });

  it("serves concurrent requests whose vouchers arrive out of order once each, charging their sum", async () => {
    const ch = testChannel();
    const { verifier, store } = setup([ch]);
    const headers = [1n, 2n, 3n, 4n, 5n, 6n].map((n) => ch.voucher(n * PRICE));
    const order = [5, 2, 0, 4, 1, 3];
    const results = await Promise.all(order.map((i) => verifier.charge(headers[i]!, PRICE)));
    expect(results.every((r) => r.ok)).toBe(true);
    expect(await store.tally(ch.id)).toEqual({ highest: 6n * PRICE, spent: 6n * PRICE });
    expect(await verifier.charge(headers[5]!, PRICE)).toMatchObject({ error: "ChannelVoucherStale" });
  });

  it("refuses a voucher of another channel presented under this channel's id", async () => {
    const a = testChannel();
    const b = testChannel();
    const { verifier } = setup([a, b]);
    const [, amount, sig] = a.voucher(PRICE).split(".");
    expect(await verifier.charge(`${b.id}.${amount}.${sig}`, PRICE)).toMatchObject({
      ok: false,
      error: "ChannelVoucherInvalid",
      message: expect.stringContaining("session key"),
    });
  });

  it("refuses a channel that pays another payee or holds another token", async () => {
    const other = testChannel({ payee: "0x00000000000000000000000000000000000000B2" });
    const otherToken = testChannel({ token: "0x00000000000000000000000000000000000000C3" });
    const { verifier } = setup([other, otherToken]);
    expect(await verifier.charge(other.voucher(PRICE), PRICE)).toMatchObject({
      error: "ChannelVoucherInvalid",
      message: expect.stringContaining("another payee"),
    });
    expect(await verifier.charge(otherToken.voucher(PRICE), PRICE)).toMatchObject({
      error: "ChannelVoucherInvalid",
      message: expect.stringContaining("another token"),
    });
  });

  it("refuses a channel opened for another gate's tag, or for none, and charges nothing for it", async () => {
    const otherGate = testChannel({ tag: "0x00000000000007a7" });
    const untagged = testChannel({ tag: undefined });
    const { verifier, store } = setup([otherGate, untagged]);
    for (const ch of [otherGate, untagged]) {
      expect(await verifier.charge(ch.voucher(PRICE), PRICE)).toMatchObject({
        ok: false,
        error: "ChannelVoucherInvalid",
        message: "the channel was opened for another gate",
        details: { tag: TAG },
      });
      expect(await store.tally(ch.id)).toBeUndefined();
    }
  });

  it("refuses a voucher signed for another chain or another contract", async () => {
    const ch = testChannel();
    const { verifier } = setup([ch]);
    for (const domain of [
      { chainId: 8453, channels },
      { chainId, channels: "0x00000000000000000000000000000000000000C4" as Address },
    ]) {
      const header = createVoucherSigner(ch.key, domain, ch.id).header(PRICE);
      expect(await verifier.charge(header, PRICE)).toMatchObject({
        ok: false,
        error: "ChannelVoucherInvalid",
      });
    }
  });

  it("refuses a voucher signed by another key and a tampered signature", async () => {
    const ch = testChannel();
    const { verifier } = setup([ch]);
    const forged = createVoucherSigner(createSessionKey(), { chainId, channels }, ch.id).header(PRICE);
    expect(await verifier.charge(forged, PRICE)).toMatchObject({ error: "ChannelVoucherInvalid" });
    const good = ch.voucher(PRICE);
    const tampered = `${good.slice(0, -2)}${good.endsWith("AA") ? "AQ" : "AA"}`;
    expect(await verifier.charge(tampered, PRICE)).toMatchObject({ error: "ChannelVoucherInvalid" });
    // Same signature, another amount: the message differs.
    const [id, , sig] = good.split(".");
    expect(await verifier.charge(`${id}.${2n * PRICE}.${sig}`, PRICE)).toMatchObject({
      error: "ChannelVoucherInvalid",
    });
  });

  it.each([
    ["empty", ""],
    ["garbage", "hello"],
    ["no signature", `0x${"ab".repeat(32)}.1000.`],
    ["huge", "x".repeat(100_000)],
  ])("refuses a malformed header (%s) as invalid without reading the source", async (_, header) => {
    const ch = testChannel();
    const { verifier, reads } = setup([ch]);
    expect(await verifier.charge(header, PRICE)).toMatchObject({
      ok: false,
      error: "ChannelVoucherInvalid",
      message: expect.stringContaining("malformed"),
    });
    expect(reads).toEqual([]);
  });

  it("refuses an unknown channel and remembers it briefly, so random ids cost one read each", async () => {
    const ch = testChannel();
    const { verifier, reads, clock } = setup([]);
    expect(await verifier.charge(ch.voucher(PRICE), PRICE)).toMatchObject({
      error: "ChannelVoucherInvalid",
      message: "no such channel",
    });
    await verifier.charge(ch.voucher(PRICE), PRICE);
    expect(reads).toHaveLength(1);
    clock.advance(6_000);
    await verifier.charge(ch.voucher(PRICE), PRICE);
    expect(reads).toHaveLength(2);
  });

  it("refuses a voucher above the deposit after refetching the channel, and accepts it after a top-up", async () => {
    const ch = testChannel({ deposit: 5n * PRICE });
    const { verifier, states, reads } = setup([ch]);
    expect(await verifier.charge(ch.voucher(6n * PRICE), PRICE)).toEqual({
      ok: false,
      error: "ChannelDepositExhausted",
      message: expect.any(String),
      details: { deposit: "5000" },
    });
    expect(reads).toHaveLength(2);
    states.set(ch.id, { ...ch.state, deposit: 10n * PRICE });
    expect((await verifier.charge(ch.voucher(6n * PRICE), PRICE)).ok).toBe(true);
  });

  it("refuses a closed channel and one whose withdrawal opens within the margin, not one further off", async () => {
    const closed = testChannel({ closed: true });
    const nearNow = Math.floor(NOW / 1000) - 3_600 + 300; // withdrawal opens in 300 s < 600 s margin
    const near = testChannel({ closeRequestedAt: nearNow });
    const far = testChannel({ closeRequestedAt: Math.floor(NOW / 1000), closeDelay: 86_400 });
    const { verifier } = setup([closed, near, far]);
    expect(await verifier.charge(closed.voucher(PRICE), PRICE)).toMatchObject({
      error: "ChannelClosing",
      message: "the channel is closed",
    });
    expect(await verifier.charge(near.voucher(PRICE), PRICE)).toMatchObject({ error: "ChannelClosing" });
    expect((await verifier.charge(far.voucher(PRICE), PRICE)).ok).toBe(true);
  });

  it("learns of a close request on a background refresh and reports the channel as closing", async () => {
    const ch = testChannel();
    const { verifier, states, clock, closing } = setup([ch]);
    expect((await verifier.charge(ch.voucher(PRICE), PRICE)).ok).toBe(true);
    const requestedAt = Math.floor(NOW / 1000);
    states.set(ch.id, { ...ch.state, closeRequestedAt: requestedAt, closeDelay: 601 });
    clock.advance(16_000); // past refreshMs: this request triggers the refresh, served from cache
    expect((await verifier.charge(ch.voucher(2n * PRICE), PRICE)).ok).toBe(true);
    await new Promise((resolve) => setImmediate(resolve));
    expect(closing).toEqual([ch.id]);
    expect(await verifier.charge(ch.voucher(3n * PRICE), PRICE)).toMatchObject({ error: "ChannelClosing" });
  });

  it("refuses a channel whose close delay or deposit is under the offer's minimums, whoever opened it", async () => {
    const instant = testChannel({ closeDelay: 0 });
    const hour = testChannel({ closeDelay: 3_600 });
    const small = testChannel({ closeDelay: 7_200, deposit: 10n * PRICE });
    const fair = testChannel({ closeDelay: 7_200 });
    const { verifier } = setup([instant, hour, small, fair], undefined, {
      minCloseDelay: 7_200,
      minDeposit: 50n * PRICE,
    });
    for (const ch of [instant, hour]) {
      expect(await verifier.charge(ch.voucher(PRICE), PRICE)).toMatchObject({
        ok: false,
        error: "ChannelVoucherInvalid",
        details: { minCloseDelay: "7200" },
      });
    }
    expect(await verifier.charge(small.voucher(PRICE), PRICE)).toMatchObject({
      ok: false,
      error: "ChannelVoucherInvalid",
      details: { minDeposit: (50n * PRICE).toString() },
    });
    expect((await verifier.charge(fair.voucher(PRICE), PRICE)).ok).toBe(true);
  });

  it("never serves from state older than maxStaleMs: a close requested while the channel was idle is read before the next voucher", async () => {
    const ch = testChannel();
    const { verifier, states, clock, reads } = setup([ch]);
    expect((await verifier.charge(ch.voucher(PRICE), PRICE)).ok).toBe(true);
    // The payer asks to close just after the read, then waits until the seller's margin has begun.
    states.set(ch.id, { ...ch.state, closeRequestedAt: Math.floor(NOW / 1000) + 1 });
    clock.advance((3_600 - 500) * 1000);
    expect(await verifier.charge(ch.voucher(2n * PRICE), PRICE)).toMatchObject({ error: "ChannelClosing" });
    expect(reads).toEqual([ch.id, ch.id]);
  });

  it("refuses to be built with a minimum close delay under its margin plus its staleness bound", () => {
    expect(() => setup([], undefined, { closeMarginSeconds: 600, minCloseDelay: 620 })).toThrow(
      /minCloseDelay/,
    );
    expect(() => setup([], undefined, { closeMarginSeconds: 3_600, minCloseDelay: 3_600 })).toThrow(
      /minCloseDelay/,
    );
    expect(() => setup([], undefined, { closeMarginSeconds: 600, minCloseDelay: 630 })).not.toThrow();
  });

  it("starts a channel new to the store from its on-chain claimed amount", async () => {
    const ch = testChannel({ claimed: 5n * PRICE });
    const { verifier, store } = setup([ch]);
    expect(await verifier.charge(ch.voucher(5n * PRICE), PRICE)).toMatchObject({
      error: "ChannelVoucherStale",
    });
    expect((await verifier.charge(ch.voucher(6n * PRICE), PRICE)).ok).toBe(true);
    expect(await store.tally(ch.id)).toEqual({ highest: 6n * PRICE, spent: 6n * PRICE });
  });

  it("gives a refunded request's price back as credit the next voucher can use", async () => {
    const ch = testChannel();
    const { verifier, store } = setup([ch]);
    const charged = (await verifier.charge(ch.voucher(PRICE), PRICE)) as ChannelCharge;
    await verifier.refund(charged);
    expect(await store.tally(ch.id)).toEqual({ highest: PRICE, spent: 0n });
    expect((await verifier.charge(ch.voucher(PRICE), PRICE)).ok).toBe(true);
  });

  it("does not charge when the store fails: the fault propagates", async () => {
    const ch = testChannel();
    const broken: VoucherStore = {
      ...createMemoryVoucherStore(),
      charge: async () => {
        throw new Error("disk full");
      },
    };
    const { verifier } = setup([ch], broken);
    await expect(verifier.charge(ch.voucher(PRICE), PRICE)).rejects.toThrow("disk full");
  });

  it("names its header X-Tollgate-Channel", () => {
    expect(CHANNEL_VOUCHER_HEADER).toBe("X-Tollgate-Channel");
  });
});
