import { type Address, type Hex, keccak256, stringToBytes } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestSessionKey, signTestVoucher } from "../../../../test/support/channelSessionKey.ts";
import { base64UrlEncode } from "../../../protocol/base64.ts";
import { systemClock } from "../../../protocol/clock.ts";
import { createTestStore } from "../../../store/createTestStore.ts";
import type { Queryable, Store } from "../../../store/store.ts";
import { createSessionKeyCache } from "./channelChain.ts";
import { claimableSummary, findChannel, markCloseWanted, upsertChannel } from "./channelRecords.ts";
import { createChannelVoucherIntake } from "./channelVoucherIntake.ts";

const contract = "0xCf7Ed3AccA5a467e9e704C703E8D87F634fB0Fc9" as Address;
const payee = "0x90F79bf6EB2c4f870365E785982E1f101E93b906" as Address;
const payer = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Address;
const chainId = 31337;

describe("channel voucher intake", () => {
  let store: Store;
  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  });
  afterAll(async () => {
    await store?.close();
  });

  async function openChannels(n: number, label: string) {
    const key = createTestSessionKey();
    const ids: Hex[] = [];
    for (let i = 0; i < n; i++) {
      const channelId = keccak256(stringToBytes(`${label} ${i}`));
      ids.push(channelId);
      await upsertChannel(store, {
        channelId,
        chainId,
        contract,
        payer,
        payee,
        token: contract,
        deposit: 2_000_000n,
        claimed: 0n,
        sessionKeyX: key.x,
        sessionKeyY: key.y,
        closeDelay: 3_600,
        closeRequestedAt: 0,
        closed: false,
      });
    }
    const voucher = (channelId: Hex, amount: bigint) => ({
      channelId,
      cumulativeAmount: amount.toString(),
      signature: base64UrlEncode(
        Buffer.from(
          signTestVoucher(key, { chainId, channels: contract, channelId, cumulativeAmount: amount }).slice(2),
          "hex",
        ),
      ),
    });
    return { ids, voucher };
  }

  /**
   * The store, except that `onUpdate(n)` runs after the n-th voucher update (inside or outside a
   * transaction, wherever the intake sends it).
   */
  function watchedStore(onUpdate: (n: number) => Promise<void>): Store {
    let updates = 0;
    const watch = (db: Queryable): Queryable => ({
      async query(sql, params) {
        const rows = await db.query(sql, params);
        if (sql.includes("SET voucher_amount")) await onUpdate(++updates);
        return rows as never;
      },
      exec: (sql) => db.exec(sql),
    });
    return Object.assign(Object.create(store) as Store, {
      query: watch(store).query,
      transaction: <T>(fn: (tx: Queryable) => Promise<T>) => store.transaction((tx) => fn(watch(tx))),
    });
  }

  it("stores a handover's vouchers together: a claim round in the middle sees none of them or all", async () => {
    const { ids, voucher } = await openChannels(4, "together");
    let reached: () => void = () => {};
    const halfway = new Promise<void>((r) => {
      reached = r;
    });
    let release: () => void = () => {};
    const released = new Promise<void>((r) => {
      release = r;
    });
    const intake = createChannelVoucherIntake({
      store: watchedStore(async (n) => {
        if (n !== 2) return;
        reached();
        await released;
      }),
      publicClient: {} as never,
      chainId,
      contract,
      tokens: [{ address: contract }],
      clock: systemClock,
      sessionKey: createSessionKeyCache(),
    });
    const accepting = intake.accept(
      payee,
      ids.map((id) => voucher(id, 250_000n)),
    );
    await halfway;
    // What a claim round reading now finds (on one PGlite connection, it waits for the handover).
    const seen = claimableSummary(store, contract).then((s) => s.value);
    await new Promise((r) => setTimeout(r, 100));
    release();
    const results = await accepting;
    expect(results.map((r) => r.status)).toEqual(["stored", "stored", "stored", "stored"]);
    expect([0n, 1_000_000n]).toContain(await seen);
    expect((await claimableSummary(store, contract)).value).toBe(1_000_000n);
  });

  it("answers one result per voucher, keeping the highest of a channel's and ignoring the ones it overtook", async () => {
    const { ids, voucher } = await openChannels(2, "results");
    const [a, b] = ids as [Hex, Hex];
    const intake = createChannelVoucherIntake({
      store,
      publicClient: {} as never,
      chainId,
      contract,
      tokens: [{ address: contract }],
      clock: systemClock,
      sessionKey: createSessionKeyCache(),
    });
    const results = await intake.accept(payee, [
      voucher(a, 10n),
      voucher(b, 20n),
      voucher(a, 30n),
      voucher(a, 25n),
      { ...voucher(b, 40n), cumulativeAmount: "41" },
    ]);
    expect(results.map((r) => [r.status, r.status === "rejected" ? r.reason : undefined])).toEqual([
      ["ignored", undefined],
      ["stored", undefined],
      ["stored", undefined],
      ["ignored", undefined],
      ["rejected", "signature is not the channel's session key"],
    ]);
    const held = await store.query<{ channel_id: string; voucher_amount: string }>(
      "SELECT channel_id, voucher_amount::text FROM channels WHERE channel_id = ANY($1::text[]) ORDER BY voucher_amount",
      [[a.toLowerCase(), b.toLowerCase()]],
    );
    expect(held.map((r) => [r.channel_id, r.voucher_amount])).toEqual([
      [b.toLowerCase(), "20"],
      [a.toLowerCase(), "30"],
    ]);
    // Resending what is held changes nothing.
    expect((await intake.accept(payee, [voucher(a, 30n)]))[0]?.status).toBe("ignored");
  });

  it("freezes the held voucher once the payee asked for a cooperative close: the close never carries less than the facilitator holds", async () => {
    const { ids, voucher } = await openChannels(1, "frozen");
    const [a] = ids as [Hex];
    const intake = createChannelVoucherIntake({
      store,
      publicClient: {} as never,
      chainId,
      contract,
      tokens: [{ address: contract }],
      clock: systemClock,
      sessionKey: createSessionKeyCache(),
    });
    expect((await intake.accept(payee, [voucher(a, 300_000n)]))[0]?.status).toBe("stored");
    await markCloseWanted(store, a);
    // Before, a voucher arriving between the payee's ask and the close transaction was held (and never
    // claimed: the close had been sent with the older one).
    expect(await intake.accept(payee, [voucher(a, 400_000n)])).toEqual([
      { channelId: a.toLowerCase(), status: "rejected", reason: "channel is being closed cooperatively" },
    ]);
    expect((await findChannel(store, a))?.voucher_amount).toBe(300_000n);
  });
});
