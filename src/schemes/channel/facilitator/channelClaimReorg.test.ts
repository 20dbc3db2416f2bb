import type { Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestStore } from "../../../store/createTestStore.ts";
import type { Store } from "../../../store/store.ts";
import { announcedAmount, recordClaimItem, reopenChannelClaim } from "./channelClaimReorg.ts";
import { finishClaim, markClaimInFlight, upsertChannel } from "./channelRecords.ts";

const address = (n: number) => `0x${n.toString(16).padStart(40, "0")}` as Hex;
const id = (n: number) => `0x${n.toString(16).padStart(64, "0")}` as Hex;

describe("reopening a channel claim a reorganisation undid", () => {
  let store: Store;
  let next = 1;
  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  });
  afterAll(() => store?.close());

  async function outboxRow(): Promise<number> {
    const rows = await store.query<{ id: string }>(
      `INSERT INTO tx_outbox (chain_id, sender, kind, owner, to_address, data, value, gas_limit)
       VALUES (31337, $1, 'channel-claim', 'claim:1', $1, '0x', 0, 100000) RETURNING id`,
      [address(7)],
    );
    return Number(rows[0]!.id);
  }

  /** A channel with a voucher of `voucher` whose claim `outbox` paid it, recorded as the handler does. */
  async function claimed(voucher: bigint, before = 0n) {
    const channelId = id(next++);
    await upsertChannel(store, {
      channelId,
      chainId: 31337,
      contract: address(1),
      payer: address(2),
      payee: address(3),
      token: address(4),
      deposit: 2_000_000n,
      claimed: before,
      sessionKeyX: id(5),
      sessionKeyY: id(6),
      closeDelay: 3_600,
      closeRequestedAt: 0,
      closed: false,
    });
    await store.query(
      "UPDATE channels SET voucher_amount = $2, announced_claimed = $3 WHERE channel_id = $1",
      [channelId, voucher, before],
    );
    const outbox = await outboxRow();
    await markClaimInFlight(store, outbox, [channelId]);
    const paid = { claimedBefore: before, cumulativeAmount: voucher };
    await store.transaction(async (tx) => {
      await finishClaim(tx, channelId, { claimed: voucher }, new Date());
      await recordClaimItem(tx, outbox, channelId, paid);
      expect(await announcedAmount(tx, channelId, paid)).toBe(voucher - before);
    });
    return { channelId, outbox, paid };
  }
  const row = async (channelId: Hex) =>
    (
      await store.query<{ claimed: string; claim_outbox_id: string | null; claim_amount: string | null }>(
        "SELECT claimed::text AS claimed, claim_outbox_id::text AS claim_outbox_id, claim_amount::text AS claim_amount FROM channels WHERE channel_id = $1",
        [channelId],
      )
    )[0];

  it("puts the channel back in the claim's flight at what the chain held before it, and announces nothing twice", async () => {
    const { channelId, outbox, paid } = await claimed(300_000n, 100_000n);
    expect(await store.transaction((tx) => reopenChannelClaim(tx, outbox))).toEqual([channelId]);
    expect(await row(channelId)).toEqual({
      claimed: "100000",
      claim_outbox_id: String(outbox),
      claim_amount: "300000",
    });
    // The claim sent again pays the same: nothing more to announce.
    expect(await store.transaction((tx) => announcedAmount(tx, channelId, paid))).toBe(0n);
    // A second reopen of the same claim (another instance's, or a check after a crash) finds nothing.
    await finishClaim(store, channelId, { claimed: 300_000n }, new Date());
    await recordClaimItem(store, outbox, channelId, paid);
    expect(await store.transaction((tx) => reopenChannelClaim(tx, outbox))).toEqual([channelId]);
    expect(await store.transaction((tx) => reopenChannelClaim(tx, outbox))).toEqual([]);
  });

  it("leaves a newer claim in flight in charge of the channel, and lowers what it holds", async () => {
    const { channelId, outbox } = await claimed(300_000n);
    const newer = await outboxRow();
    await markClaimInFlight(store, newer, [channelId]);
    await store.transaction((tx) => reopenChannelClaim(tx, outbox));
    expect(await row(channelId)).toEqual({
      claimed: "0",
      claim_outbox_id: String(newer),
      claim_amount: "300000",
    });
  });

  it("changes nothing when the reopen's transaction rolls back (a crash halfway)", async () => {
    const { channelId, outbox } = await claimed(500_000n);
    await expect(
      store.transaction(async (tx) => {
        await reopenChannelClaim(tx, outbox);
        throw new Error("crashed");
      }),
    ).rejects.toThrow("crashed");
    expect(await row(channelId)).toEqual({ claimed: "500000", claim_outbox_id: null, claim_amount: null });
    // The next check reopens it.
    expect(await store.transaction((tx) => reopenChannelClaim(tx, outbox))).toEqual([channelId]);
  });

  it("announces only what a claim adds beyond earlier announcements, and what a claim paid when the payee claimed some itself", async () => {
    const { channelId } = await claimed(200_000n);
    // The payee claimed up to 350 000 itself; our claim pays 350 000 → 500 000.
    expect(
      await store.transaction((tx) =>
        announcedAmount(tx, channelId, { claimedBefore: 350_000n, cumulativeAmount: 500_000n }),
      ),
    ).toBe(150_000n);
    // After a reorganisation the chain held 200 000 when the claim was sent again: 300 000 paid, but
    // 150 000 of it was announced already.
    expect(
      await store.transaction((tx) =>
        announcedAmount(tx, channelId, { claimedBefore: 200_000n, cumulativeAmount: 500_000n }),
      ),
    ).toBe(0n);
  });
});
