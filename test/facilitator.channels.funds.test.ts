/**
 * The facilitator's relayed top-up and withdrawal of a channel on a devnet: a top-up signed by the
 * payer grows the deposit without the payer paying gas, is answered again (no second transaction) on a
 * resend, and is refused — sending nothing — when another key signed it, it was signed for another
 * channel, it is below the minimum, or the channel is closing. A withdrawal is relayed for anyone once
 * the close delay is over, pays the payer only, claims the payee's held voucher first, and is answered
 * from the chain when repeated.
 */
import { randomBytes } from "node:crypto";
import { type Address, type Hex, toHex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { signChannelCloseRequest } from "../src/chain/actions/channels/signChannelCloseRequest.ts";
import { signChannelTopUp } from "../src/chain/actions/channels/signChannelTopUp.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../src/facilitator/createFacilitator.ts";
import {
  ChannelOpenResponseSchema,
  ChannelTopUpResponseSchema,
  ChannelWithdrawResponseSchema,
} from "../src/protocol/channels.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  signTestOpen,
  startChannelFacilitator,
  wireVoucher,
} from "./support/channelFixtures.ts";

const CLOSE_DELAY = 3_600; // TollgateChannels.MIN_CLOSE_DELAY

describe("facilitator channel top-up and withdrawal", () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let url: string;
  let gas: DevnetAccount;
  let payer: DevnetAccount;
  let payer2: DevnetAccount;
  let payee: DevnetAccount;
  let stranger: DevnetAccount;
  let apiKey: string;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 8 });
    [, payer, payer2, payee, stranger] = devnet.accounts as DevnetAccount[] as [
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
    ];
    gas = devnet.accounts[7]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: {
        claims: {
          thresholdValue: 1_000_000_000n,
          maxAgeMs: 3_600_000,
          intervalMs: 100,
          operatorCacheMs: 0,
        },
        minDeposit: 100_000n,
        perPayer: { capacity: 1_000, refillPerSecond: 1_000 },
      },
      outbox: { reconcileIntervalMs: 100 },
    }));
    url = server.url;
    apiKey = await registerTestProvider(url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  });
  afterAll(async () => {
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
  const balance = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const chainState = (channelId: Hex) =>
    readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });
  const refusal = async (response: Response) => [
    response.status,
    ((await response.json()) as { error: { code: string } }).error.code,
  ];
  const gasNonce = () => devnet.publicClient.getTransactionCount({ address: gas.address });

  async function open(amount = 1_000_000n) {
    const signed = await signTestOpen(devnet, payer, payee.address, { amount, closeDelay: CLOSE_DELAY });
    const response = await post("/channels", signed.body);
    expect(response.status).toBe(201);
    ChannelOpenResponseSchema.parse(await response.json());
    return signed;
  }

  async function topUpBody(channelId: Hex, amount: bigint, signer = payer) {
    const salt = toHex(randomBytes(32));
    const validBefore = (await devnet.publicClient.getBlock()).timestamp + 600n;
    const signed = await signChannelTopUp(signer.account, {
      chainId: devnet.chain.id,
      channels: devnet.contracts.channels,
      tokenDomain: {
        name: devnet.token.name,
        version: devnet.token.version,
        chainId: devnet.chain.id,
        verifyingContract: devnet.contracts.usd,
      },
      channelId,
      amount,
      salt,
      validAfter: 0n,
      validBefore,
    });
    return {
      amount: amount.toString(),
      salt,
      validAfter: "0",
      validBefore: validBefore.toString(),
      signature: signed.signature,
    };
  }

  async function requestClose(channelId: Hex) {
    const deadline = (await devnet.publicClient.getBlock()).timestamp + 600n;
    const signature = await signChannelCloseRequest(payer.account, {
      chainId: devnet.chain.id,
      channels: devnet.contracts.channels,
      channelId,
      deadline,
    });
    const response = await post(`/channels/${channelId}/close-request`, {
      deadline: deadline.toString(),
      signature,
    });
    expect(response.status).toBe(200);
  }

  it("relays a payer's top-up gaslessly and answers a resend with the channel, without a second transaction", async () => {
    const s = await open();
    const ethBefore = await devnet.publicClient.getBalance({ address: payer.address });
    const usdBefore = await balance(payer.address);
    const body = await topUpBody(s.channelId, 500_000n);
    const response = await post(`/channels/${s.channelId}/top-up`, body);
    expect(response.status).toBe(201);
    const reply = ChannelTopUpResponseSchema.parse(await response.json());
    expect(reply.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(reply.channel.deposit).toBe("1500000");
    expect((await chainState(s.channelId)).deposit).toBe(1_500_000n);
    expect(await balance(payer.address)).toBe(usdBefore - 500_000n);
    expect(await devnet.publicClient.getBalance({ address: payer.address })).toBe(ethBefore);

    const nonce = await gasNonce();
    const [again, concurrent] = await Promise.all([
      post(`/channels/${s.channelId}/top-up`, body),
      post(`/channels/${s.channelId}/top-up`, body),
    ]);
    for (const r of [again, concurrent]) {
      expect(r.status).toBe(200);
      const repeat = ChannelTopUpResponseSchema.parse(await r.json());
      expect(repeat.transaction).toBeUndefined();
      expect(repeat.channel.deposit).toBe("1500000");
    }
    expect(await gasNonce()).toBe(nonce);
    expect((await chainState(s.channelId)).deposit).toBe(1_500_000n);
  });

  it("relays a top-up of exactly the configured minimum deposit", async () => {
    const s = await open();
    const response = await post(`/channels/${s.channelId}/top-up`, await topUpBody(s.channelId, 100_000n));
    expect(response.status).toBe(201);
    expect(ChannelTopUpResponseSchema.parse(await response.json()).channel.deposit).toBe("1100000");
    expect((await chainState(s.channelId)).deposit).toBe(1_100_000n);
  });

  it("refuses, sending nothing, a top-up signed by another key or for another channel, below the minimum, on a closing, unknown or malformed channel", async () => {
    const s = await open();
    const other = await open();
    const nonce = await gasNonce();
    // Signed by someone else for the payer's channel: the token would take it from the signer, not the payer.
    const byStranger = await topUpBody(s.channelId, 200_000n, payer2);
    expect(await refusal(await post(`/channels/${s.channelId}/top-up`, byStranger))).toEqual([
      422,
      "InvalidSignature",
    ]);
    // The payer's authorization for one channel shown for another: its nonce binds the channel.
    const forOther = await topUpBody(other.channelId, 200_000n);
    expect(await refusal(await post(`/channels/${s.channelId}/top-up`, forOther))).toEqual([
      422,
      "InvalidSignature",
    ]);
    const small = await topUpBody(s.channelId, 9n);
    expect(await refusal(await post(`/channels/${s.channelId}/top-up`, small))).toEqual([
      422,
      "AmountMismatch",
    ]);
    // Below the minimum deposit this facilitator opens channels with (100 000 here, not the token's 10 ×
    // minimum payment): a top-up moves no less than an open would.
    const belowDeposit = await post(`/channels/${s.channelId}/top-up`, await topUpBody(s.channelId, 99_999n));
    expect(belowDeposit.status).toBe(422);
    expect(await belowDeposit.json()).toMatchObject({
      error: { code: "AmountMismatch", details: { reason: "top_up_below_minimum", minimum: "100000" } },
    });
    const unknown = `0x${"ab".repeat(32)}`;
    expect(
      await refusal(await post(`/channels/${unknown}/top-up`, await topUpBody(unknown as Hex, 200_000n))),
    ).toEqual([404, "NotFound"]);
    expect(await refusal(await post("/channels/0x12/top-up", forOther))).toEqual([400, "InvalidRequest"]);
    expect(
      await refusal(await post(`/channels/${s.channelId}/top-up`, { ...forOther, amount: "-1" })),
    ).toEqual([400, "InvalidRequest"]);
    expect(await gasNonce()).toBe(nonce);
    await requestClose(s.channelId);
    const afterClose = await gasNonce();
    const late = await topUpBody(s.channelId, 200_000n);
    expect(await refusal(await post(`/channels/${s.channelId}/top-up`, late))).toEqual([
      402,
      "ChannelClosing",
    ]);
    expect(await gasNonce()).toBe(afterClose);
    expect((await chainState(s.channelId)).deposit).toBe(1_000_000n);
  });

  it("withdraws for the payer after the close delay, claiming the payee's held voucher first, and answers a repeat from the chain", async () => {
    const s = await open();
    const notAsked = await post(`/channels/${s.channelId}/withdraw`, {});
    expect(await refusal(notAsked)).toEqual([400, "InvalidRequest"]);
    const stored = await post(
      "/channels/vouchers",
      { vouchers: [wireVoucher(devnet, s.key, s.channelId, 70_000n)] },
      { authorization: `Bearer ${apiKey}` },
    );
    expect(stored.status).toBe(200);
    await requestClose(s.channelId);
    const early = await post(`/channels/${s.channelId}/withdraw`, {});
    expect(early.status).toBe(400);
    expect(Number(early.headers.get("retry-after"))).toBeGreaterThan(0);
    // The close request made the voucher's claim urgent: it lands before any withdrawal.
    for (let i = 0; i < 600 && (await chainState(s.channelId)).claimed < 70_000n; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect((await chainState(s.channelId)).claimed).toBe(70_000n);
    await devnet.advanceTime(CLOSE_DELAY + 1);
    // A later voucher the gate hands over just before the withdrawal is claimed before it, not lost.
    await post(
      "/channels/vouchers",
      { vouchers: [wireVoucher(devnet, s.key, s.channelId, 80_000n)] },
      { authorization: `Bearer ${apiKey}` },
    );
    const payerBefore = await balance(payer.address);
    const strangerBefore = await balance(stranger.address);
    // Anyone may ask: the money goes to the payer only.
    let response = await post(`/channels/${s.channelId}/withdraw`, {});
    for (let i = 0; i < 100 && response.status === 503; i++) {
      expect(
        ((await response.json()) as { error: { details: { reason: string } } }).error.details.reason,
      ).toBe("claim_pending");
      await new Promise((r) => setTimeout(r, 100));
      response = await post(`/channels/${s.channelId}/withdraw`, {});
    }
    expect(response.status).toBe(200);
    const reply = ChannelWithdrawResponseSchema.parse(await response.json());
    expect(reply).toMatchObject({ channelId: s.channelId, claimed: "80000", refunded: "920000" });
    expect(reply.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await balance(payer.address)).toBe(payerBefore + 920_000n);
    expect(await balance(stranger.address)).toBe(strangerBefore);
    expect((await chainState(s.channelId)).closed).toBe(true);
    const nonce = await gasNonce();
    const repeat = ChannelWithdrawResponseSchema.parse(
      await (await post(`/channels/${s.channelId}/withdraw`, {})).json(),
    );
    expect(repeat).toEqual({ channelId: s.channelId, claimed: "80000", refunded: "920000" });
    expect(await gasNonce()).toBe(nonce);
    const closed = await store.query<{ data: Record<string, unknown> }>(
      "SELECT data FROM events WHERE type = 'channel.closed'",
    );
    expect(closed.filter((e) => e.data.channelId === s.channelId)).toHaveLength(1);
  });
});
