import { type Address, type Hex, keccak256, stringToBytes } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openChannelWithAuthorization } from "../src/chain/actions/channels/openChannelWithAuthorization.ts";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { signChannelCloseRequest } from "../src/chain/actions/channels/signChannelCloseRequest.ts";
import { withdrawChannel } from "../src/chain/actions/channels/withdrawChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../src/facilitator/createFacilitator.ts";
import {
  ChannelCloseRequestResponseSchema,
  ChannelCloseResponseSchema,
  ChannelOpenResponseSchema,
  ChannelStateSchema,
  ChannelVouchersResponseSchema,
} from "../src/protocol/channels.ts";
import { SupportedResponseSchema } from "../src/protocol/facilitator.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  signTestOpen,
  startChannelFacilitator,
  wireVoucher,
} from "./support/channelFixtures.ts";

const THRESHOLD = 1_000_000n;

describe("facilitator channels", () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let url: string;
  let gas: DevnetAccount;
  let payer: DevnetAccount;
  let payer2: DevnetAccount;
  let payee: DevnetAccount;
  let otherPayee: DevnetAccount;
  let apiKey: string;
  let otherKey: string;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 8 });
    [, payer, payer2, payee, otherPayee] = devnet.accounts as DevnetAccount[] as [
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
        claims: { thresholdValue: THRESHOLD, maxAgeMs: 3_600_000, intervalMs: 100, operatorCacheMs: 0 },
        minDeposit: 100_000n,
        perPayer: { capacity: 1_000, refillPerSecond: 1_000 },
      },
      outbox: { reconcileIntervalMs: 100 },
    }));
    url = server.url;
    apiKey = await registerTestProvider(url, payee);
    otherKey = await registerTestProvider(url, otherPayee);
    // The payee lets the facilitator's gas account claim and close its channels.
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
  const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
  const balance = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const chainState = (channelId: Hex) =>
    readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });
  const errorCode = async (response: Response) =>
    ((await response.json()) as { error: { code: string } }).error.code;
  const eventsOf = async (type: string, channelId: Hex) =>
    (
      await store.query<{ data: Record<string, unknown> }>(
        "SELECT data FROM events WHERE type = $1 ORDER BY id",
        [type],
      )
    ).filter((e) => e.data.channelId === channelId);

  async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 60_000): Promise<T> {
    const end = Date.now() + ms;
    for (;;) {
      const value = await read();
      if (done(value) || Date.now() > end) return value;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async function openThroughFacilitator(from = payer, amount = 2_000_000n) {
    const signed = await signTestOpen(devnet, from, payee.address, { amount });
    const response = await post("/channels", signed.body);
    expect(response.status).toBe(201);
    ChannelOpenResponseSchema.parse(await response.json());
    return signed;
  }

  describe("POST /channels", () => {
    it("relays a gasless open: the payer's one signature opens the channel and the facilitator pays the gas", async () => {
      const signed = await signTestOpen(devnet, payer, payee.address);
      const ethBefore = await devnet.publicClient.getBalance({ address: payer.address });
      const usdBefore = await balance(payer.address);
      const response = await post("/channels", signed.body);
      expect(response.status).toBe(201);
      const body = ChannelOpenResponseSchema.parse(await response.json());
      expect(body.channelId).toBe(signed.channelId);
      expect(body.channel).toMatchObject({
        payer: payer.address,
        payee: payee.address,
        deposit: "2000000",
        claimed: "0",
        sessionKeyX: signed.key.x,
        closeDelay: 3_600,
        closeRequestedAt: 0,
        closed: false,
      });
      expect(await devnet.publicClient.getBalance({ address: payer.address })).toBe(ethBefore);
      expect(await balance(payer.address)).toBe(usdBefore - 2_000_000n);
      const receipt = await devnet.publicClient.getTransactionReceipt({ hash: body.transaction });
      expect(receipt.from.toLowerCase()).toBe(gas.address.toLowerCase());
      const opened = await eventsOf("channel.opened", signed.channelId);
      expect(opened).toHaveLength(1);
      expect(opened[0]?.data).toMatchObject({ provider: payee.address.toLowerCase(), deposit: "2000000" });
    });

    it("is idempotent on the authorization: a resend and concurrent duplicates answer the same channel and transaction", async () => {
      const signed = await signTestOpen(devnet, payer, payee.address);
      const [a, b, c] = await Promise.all([1, 2, 3].map(() => post("/channels", signed.body)));
      const bodies = await Promise.all(
        [a, b, c].map(async (r) => ChannelOpenResponseSchema.parse(await r!.json())),
      );
      expect([a, b, c].map((r) => r!.status).sort()).toEqual([200, 200, 201]);
      expect(new Set(bodies.map((x) => x.transaction)).size).toBe(1);
      const again = await post("/channels", signed.body);
      expect(again.status).toBe(200);
      expect(ChannelOpenResponseSchema.parse(await again.json()).transaction).toBe(bodies[0]!.transaction);
      expect((await chainState(signed.channelId)).deposit).toBe(2_000_000n);
      expect(await eventsOf("channel.opened", signed.channelId)).toHaveLength(1);
    });

    it("announces an open whose relayer died between its transaction and its row, once, from the contract's log; a retry answers it", async () => {
      const signed = await signTestOpen(devnet, payer, payee.address);
      // Another instance broadcast the open and died before recording it: the chain has it, the table not.
      const b = signed.body;
      const hash = await openChannelWithAuthorization(devnet.walletClient(otherPayee), {
        channels: devnet.contracts.channels,
        payer: b.payer,
        payee: b.payee,
        token: b.token,
        amount: BigInt(b.amount),
        sessionKeyX: b.sessionKeyX,
        sessionKeyY: b.sessionKeyY,
        closeDelay: BigInt(b.closeDelay),
        salt: b.salt,
        validAfter: BigInt(b.validAfter),
        validBefore: BigInt(b.validBefore),
        signature: b.signature,
      });
      await devnet.publicClient.waitForTransactionReceipt({ hash });
      const opened = await until(
        () => eventsOf("channel.opened", signed.channelId),
        (events) => events.length > 0,
      );
      expect(opened.map((e) => e.data)).toEqual([
        expect.objectContaining({
          provider: payee.address.toLowerCase(),
          deposit: "2000000",
          transaction: hash,
        }),
      ]);
      const retry = await post("/channels", b);
      expect(retry.status).toBe(200);
      expect(ChannelOpenResponseSchema.parse(await retry.json()).transaction).toBe(hash);
      expect(await eventsOf("channel.opened", signed.channelId)).toHaveLength(1);
    });

    it("refuses another network, another contract, an unserved token, a small deposit, a short close delay and malformed bodies", async () => {
      const { body } = await signTestOpen(devnet, payer, payee.address);
      const cases: [unknown, number, string][] = [
        [{ ...body, network: "eip155:8453" }, 422, "UnsupportedNetwork"],
        [{ ...body, contract: devnet.contracts.batchSettler }, 400, "InvalidRequest"],
        [{ ...body, token: devnet.contracts.batchSettler }, 422, "UnsupportedToken"],
        [{ ...body, amount: "99999" }, 422, "AmountMismatch"],
        [{ ...body, closeDelay: 59 }, 400, "InvalidRequest"],
        [{ ...body, closeDelay: 31 * 86_400 }, 400, "InvalidRequest"],
        [{ ...body, amount: "-1" }, 400, "InvalidRequest"],
        [{ ...body, extra: true }, 400, "InvalidRequest"],
        ["not an object", 400, "InvalidRequest"],
      ];
      for (const [request, status, code] of cases) {
        const response = await post("/channels", request);
        expect({ status: response.status, code: await errorCode(response) }).toEqual({ status, code });
      }
    });

    it("refuses terms the payer did not sign, an expired authorization, a key off the curve and an uncovered deposit, sending nothing", async () => {
      const nonceBefore = await devnet.publicClient.getTransactionCount({ address: gas.address });
      const { body } = await signTestOpen(devnet, payer, payee.address);
      const tampered = await post("/channels", { ...body, payee: otherPayee.address });
      expect([tampered.status, await errorCode(tampered)]).toEqual([422, "InvalidSignature"]);
      const now = (await devnet.publicClient.getBlock()).timestamp;
      const late = await signTestOpen(devnet, payer, payee.address, { validBefore: now + 5n });
      const expired = await post("/channels", late.body);
      expect([expired.status, await errorCode(expired)]).toEqual([422, "AuthorizationExpired"]);
      const offCurve = await post("/channels", {
        ...body,
        sessionKeyY: keccak256(stringToBytes("not a point")),
      });
      expect([offCurve.status, await errorCode(offCurve)]).toEqual([400, "InvalidRequest"]);
      const poor = devnet.accounts[6]!;
      const tooMuch = await signTestOpen(devnet, poor, payee.address, {
        amount: (await balance(poor.address)) + 1n,
      });
      const refused = await post("/channels", tooMuch.body);
      expect([refused.status, await errorCode(refused)]).toEqual([402, "InsufficientFunds"]);
      expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(nonceBefore);
    });
  });

  describe("GET /channels/:id", () => {
    it("answers a channel's public chain state, 404 for an unknown id and 400 for a malformed one", async () => {
      const signed = await openThroughFacilitator();
      const response = await fetch(`${url}/channels/${signed.channelId}`);
      expect(response.status).toBe(200);
      expect(ChannelStateSchema.parse(await response.json())).toMatchObject({
        channelId: signed.channelId,
        network: devnet.network,
        contract: devnet.contracts.channels,
        payer: payer.address,
        payee: payee.address,
        token: devnet.contracts.usd,
        deposit: "2000000",
        claimed: "0",
        sessionKeyX: signed.key.x,
        sessionKeyY: signed.key.y,
        closeDelay: 3_600,
        closableAt: 0,
      });
      const unknown = await fetch(`${url}/channels/${keccak256(stringToBytes("none"))}`);
      expect([unknown.status, await errorCode(unknown)]).toEqual([404, "NotFound"]);
      const malformed = await fetch(`${url}/channels/0x1234`);
      expect([malformed.status, await errorCode(malformed)]).toEqual([400, "InvalidRequest"]);
    });
  });

  describe("POST /channels/vouchers and claims", () => {
    it("keeps the highest verified voucher per channel and reports each refusal, for the payee's key only", async () => {
      const a = await openThroughFacilitator();
      const b = await openThroughFacilitator(payer2);
      const v = (s: typeof a, amount: bigint) => wireVoucher(devnet, s.key, s.channelId, amount);
      const forged = { ...v(a, 50_000n), cumulativeAmount: "60000" };
      const response = await post(
        "/channels/vouchers",
        { vouchers: [v(a, 40_000n), v(b, 70_000n), forged, v(a, 2_000_001n), v(b, 60_000n)] },
        bearer(apiKey),
      );
      expect(response.status).toBe(200);
      const { results } = ChannelVouchersResponseSchema.parse(await response.json());
      expect(results.map((r) => [r.status, r.reason])).toEqual([
        ["stored", undefined],
        ["stored", undefined],
        ["rejected", "signature is not the channel's session key"],
        ["rejected", "cumulative amount is above the deposit"],
        ["ignored", undefined],
      ]);
      // A resend of the same vouchers changes nothing.
      const again = ChannelVouchersResponseSchema.parse(
        await (await post("/channels/vouchers", { vouchers: [v(a, 40_000n)] }, bearer(apiKey))).json(),
      );
      expect(again.results[0]?.status).toBe("ignored");
      // Another provider cannot hand over (or learn anything beyond the public chain) for this payee.
      const other = ChannelVouchersResponseSchema.parse(
        await (await post("/channels/vouchers", { vouchers: [v(a, 80_000n)] }, bearer(otherKey))).json(),
      );
      expect(other.results[0]).toMatchObject({
        status: "rejected",
        reason: "not a channel of this provider",
      });
      const unknown = wireVoucher(devnet, a.key, keccak256(stringToBytes("nowhere")), 1n);
      const none = ChannelVouchersResponseSchema.parse(
        await (await post("/channels/vouchers", { vouchers: [unknown] }, bearer(apiKey))).json(),
      );
      expect(none.results[0]).toMatchObject({ status: "rejected", reason: "no such channel" });
      const anonymous = await post("/channels/vouchers", { vouchers: [v(a, 90_000n)] });
      expect([anonymous.status, await errorCode(anonymous)]).toEqual([401, "Unauthorized"]);
      const empty = await post("/channels/vouchers", { vouchers: [] }, bearer(apiKey));
      expect(empty.status).toBe(400);
    });

    it("claims the latest vouchers of many channels in one transaction once their value reaches the threshold", async () => {
      const opened: Awaited<ReturnType<typeof openThroughFacilitator>>[] = [];
      for (let i = 0; i < 5; i++) opened.push(await openThroughFacilitator(i % 2 === 0 ? payer : payer2));
      const payeeBefore = await balance(payee.address);
      // 5 × 150 000 = 750 000: below the threshold, nothing is claimed.
      await post(
        "/channels/vouchers",
        { vouchers: opened.map((s) => wireVoucher(devnet, s.key, s.channelId, 150_000n)) },
        bearer(apiKey),
      );
      await new Promise((r) => setTimeout(r, 500));
      expect((await chainState(opened[0]!.channelId)).claimed).toBe(0n);
      // Newer vouchers bring it to 5 × 250 000 = 1 250 000 (plus what earlier tests left unclaimed).
      await post(
        "/channels/vouchers",
        { vouchers: opened.map((s) => wireVoucher(devnet, s.key, s.channelId, 250_000n)) },
        bearer(apiKey),
      );
      const states = await until(
        () => Promise.all(opened.map((s) => chainState(s.channelId))),
        (all) => all.every((c) => c.claimed === 250_000n),
      );
      expect(states.map((c) => c.claimed)).toEqual(opened.map(() => 250_000n));
      expect(await balance(payee.address)).toBeGreaterThanOrEqual(payeeBefore + 1_250_000n);
      // One transaction carried them all.
      // The outcome is recorded once the outbox has the receipt (a moment after the chain shows it).
      const claimEvents = await until(
        () => Promise.all(opened.map((s) => eventsOf("channel.claimed", s.channelId))),
        (all) => all.every((e) => e.length > 0),
      );
      expect(claimEvents.map((e) => e.length)).toEqual(opened.map(() => 1));
      expect(new Set(claimEvents.map((e) => e[0]?.data.transaction)).size).toBe(1);
      expect(claimEvents[0]?.[0]?.data).toMatchObject({
        provider: payee.address.toLowerCase(),
        amount: "250000",
      });
    });
  });

  it("sends no claim for a payee that has not named the facilitator its operator, and claims once it has", async () => {
    const signed = await signTestOpen(devnet, payer, otherPayee.address);
    expect((await post("/channels", signed.body)).status).toBe(201);
    const claimsBefore = await store.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM tx_outbox WHERE kind = 'channel-claim'",
    );
    const hand = (amount: bigint) =>
      post(
        "/channels/vouchers",
        { vouchers: [wireVoucher(devnet, signed.key, signed.channelId, amount)] },
        bearer(otherKey),
      );
    expect((await hand(1_500_000n)).status).toBe(200);
    const held = await until(
      () =>
        store.query<{ claim_error: string | null }>(
          "SELECT claim_error FROM channels WHERE channel_id = $1",
          [signed.channelId],
        ),
      (rows) => rows[0]?.claim_error === "NotOperator",
    );
    expect(held[0]?.claim_error).toBe("NotOperator");
    expect(
      await store.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM tx_outbox WHERE kind = 'channel-claim'",
      ),
    ).toEqual(claimsBefore);
    await nameChannelOperator(devnet, otherPayee, gas.address);
    expect((await hand(1_600_000n)).status).toBe(200);
    const state = await until(
      () => chainState(signed.channelId),
      (c) => c.claimed === 1_600_000n,
    );
    expect(state.claimed).toBe(1_600_000n);
  });

  describe("closing", () => {
    it("relays the payer's signed close request once, claims the unclaimed voucher at once, and lets the payer withdraw the rest after the delay", async () => {
      const s = await openThroughFacilitator();
      // Below the threshold: only the close request makes it urgent.
      await post(
        "/channels/vouchers",
        { vouchers: [wireVoucher(devnet, s.key, s.channelId, 30_000n)] },
        bearer(apiKey),
      );
      const deadline = (await devnet.publicClient.getBlock()).timestamp + 600n;
      const sign = (who: DevnetAccount) =>
        signChannelCloseRequest(who.account, {
          chainId: devnet.chain.id,
          channels: devnet.contracts.channels,
          channelId: s.channelId,
          deadline,
        });
      const byStranger = await post(`/channels/${s.channelId}/close-request`, {
        deadline: deadline.toString(),
        signature: await sign(payer2),
      });
      expect([byStranger.status, await errorCode(byStranger)]).toEqual([422, "InvalidSignature"]);
      const body = { deadline: deadline.toString(), signature: await sign(payer) };
      const response = await post(`/channels/${s.channelId}/close-request`, body);
      expect(response.status).toBe(200);
      const requested = ChannelCloseRequestResponseSchema.parse(await response.json());
      expect(requested.closableAt).toBe(requested.closeRequestedAt + 3_600);
      expect(requested.transaction).toMatch(/^0x[0-9a-f]{64}$/);
      const repeat = ChannelCloseRequestResponseSchema.parse(
        await (await post(`/channels/${s.channelId}/close-request`, body)).json(),
      );
      expect(repeat).toEqual({ ...requested, transaction: undefined });
      expect(await eventsOf("channel.close_requested", s.channelId)).toHaveLength(1);
      const claimed = await until(
        () => chainState(s.channelId),
        (c) => c.claimed === 30_000n,
      );
      expect(claimed.claimed).toBe(30_000n);
      await devnet.advanceTime(3_600);
      const payerBefore = await balance(payer.address);
      await devnet.publicClient.waitForTransactionReceipt({
        hash: await withdrawChannel(devnet.walletClient(payer), {
          channels: devnet.contracts.channels,
          channelId: s.channelId,
        }),
      });
      expect(await balance(payer.address)).toBe(payerBefore + 2_000_000n - 30_000n);
      const closed = await until(
        () => eventsOf("channel.closed", s.channelId),
        (e) => e.length > 0,
      );
      expect(closed[0]?.data).toMatchObject({ claimed: "30000", refunded: "1970000" });
    });

    it("closes cooperatively on the payee's request: its last voucher is paid and the rest returns to the payer", async () => {
      const s = await openThroughFacilitator();
      await post(
        "/channels/vouchers",
        { vouchers: [wireVoucher(devnet, s.key, s.channelId, 123_000n)] },
        bearer(apiKey),
      );
      const payerBefore = await balance(payer.address);
      const byOther = await post(`/channels/${s.channelId}/close`, {}, bearer(otherKey));
      expect([byOther.status, await errorCode(byOther)]).toEqual([404, "NotFound"]);
      const response = await post(`/channels/${s.channelId}/close`, {}, bearer(apiKey));
      expect(response.status).toBe(200);
      expect(ChannelCloseResponseSchema.parse(await response.json())).toEqual({
        channelId: s.channelId,
        status: "closed",
        claimed: "123000",
        refunded: "1877000",
      });
      expect(await chainState(s.channelId)).toMatchObject({ closed: true, claimed: 123_000n });
      expect(await balance(payer.address)).toBe(payerBefore + 1_877_000n);
      expect((await eventsOf("channel.closed", s.channelId))[0]?.data).toMatchObject({ claimed: "123000" });
      // Vouchers for a closed channel are refused.
      const late = ChannelVouchersResponseSchema.parse(
        await (
          await post(
            "/channels/vouchers",
            { vouchers: [wireVoucher(devnet, s.key, s.channelId, 200_000n)] },
            bearer(apiKey),
          )
        ).json(),
      );
      expect(late.results[0]).toMatchObject({ status: "rejected", reason: "channel is closed" });
    });
  });

  it("names its TollgateChannels contract and gas account in GET /supported", async () => {
    const supported = SupportedResponseSchema.parse(await (await fetch(`${url}/supported`)).json());
    expect(supported.networks[0]).toMatchObject({
      channels: devnet.contracts.channels,
      signers: [gas.address],
    });
  });

  it("documents every channel route it serves in its OpenAPI document", async () => {
    const served = [
      ...new Set(
        facilitator.app.routes
          .filter((r) => r.method !== "ALL" && r.path.startsWith("/channels"))
          .map((r) => `${r.method.toLowerCase()} ${r.path}`),
      ),
    ];
    expect(served).toHaveLength(7);
    const doc = (await (await fetch(`${url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, unknown>>;
    };
    const documented = Object.entries(doc.paths).flatMap(([path, methods]) =>
      Object.keys(methods).map((m) => `${m} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
    );
    expect(served.filter((r) => !documented.includes(r))).toEqual([]);
  });
});
