/**
 * A channel claim undone by a chain reorganisation, on a devnet running Circle's USDC: the claim worker
 * claimed a voucher through the outbox and recorded the receipt, then the block holding the claim was
 * rolled back (`anvil_rollback`) or replaced by another (`anvil_reorg`). The facilitator notices that the
 * claim left the chain and sends it again; in the end, read from the chain, the payee holds exactly what
 * the vouchers promise, paid once, and the facilitator's channel row, outbox row and `channel.claimed`
 * events agree with the chain, nothing announced twice.
 */
import type { Address, Hash, Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../src/facilitator/createFacilitator.ts";
import { ChannelVouchersResponseSchema } from "../src/protocol/channels.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  type SignedTestOpen,
  signTestOpen,
  startChannelFacilitator,
  wireVoucher,
} from "./support/channelFixtures.ts";

describe("channel claims after a reorganisation undid them", { timeout: 60_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let apiKey: string;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 5 });
    [, payer, payee] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
    const gas = devnet.accounts[4]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: {
        // Every voucher is claimed at once.
        claims: { thresholdValue: 1n, maxAgeMs: 3_600_000, intervalMs: 100, operatorCacheMs: 0 },
        minDeposit: 100_000n,
      },
      outbox: { reconcileIntervalMs: 50, reorgCheckIntervalMs: 50 },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  }, 60_000);

  afterAll(async () => {
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
  });

  const balanceOf = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const chainState = (channelId: Hex) =>
    readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });
  const receiptOrNull = (hash: Hash) => devnet.publicClient.getTransactionReceipt({ hash }).catch(() => null);
  const channelRow = async (channelId: Hex) =>
    (
      await store.query<{ claimed: string; claim_outbox_id: string | null; claim_error: string | null }>(
        "SELECT claimed::text AS claimed, claim_outbox_id::text AS claim_outbox_id, claim_error FROM channels WHERE channel_id = $1",
        [channelId.toLowerCase()],
      )
    )[0];
  const claimedEvents = async (channelId: Hex) =>
    (
      await store.query<{
        data: { channelId: string; amount: string; cumulativeAmount: string; transaction: Hash };
      }>("SELECT data FROM events WHERE type = 'channel.claimed' ORDER BY id")
    ).filter((e) => e.data.channelId === channelId.toLowerCase());
  const claimRows = () =>
    store.query<{ id: string; status: string; tx_hash: Hash | null; block_number: string | null }>(
      "SELECT id::text AS id, status, tx_hash, block_number::text AS block_number FROM tx_outbox WHERE kind = 'channel-claim' ORDER BY id",
    );

  async function open(amount = 2_000_000n): Promise<SignedTestOpen> {
    const s = await signTestOpen(devnet, payer, payee.address, { amount });
    const response = await fetch(`${server.url}/channels`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(s.body),
    });
    expect(response.status).toBe(201);
    return s;
  }

  async function hand(s: SignedTestOpen, amount: bigint) {
    const response = await fetch(`${server.url}/channels/vouchers`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ vouchers: [wireVoucher(devnet, s.key, s.channelId, amount)] }),
    });
    expect(ChannelVouchersResponseSchema.parse(await response.json()).results[0]?.status).toBe("stored");
  }

  /** Hands a voucher over and waits until its claim is mined and its receipt recorded. */
  async function claimRecorded(s: SignedTestOpen, amount: bigint) {
    await hand(s, amount);
    await vi.waitFor(
      async () => {
        const row = await channelRow(s.channelId);
        expect(row?.claimed).toBe(amount.toString());
        expect(row?.claim_outbox_id).toBeNull();
      },
      { timeout: 20_000, interval: 50 },
    );
    const events = await claimedEvents(s.channelId);
    const receipt = await devnet.publicClient.getTransactionReceipt({
      hash: events.at(-1)!.data.transaction,
    });
    expect((await chainState(s.channelId)).claimed).toBe(amount);
    return receipt;
  }

  /** Once the claim is back on the chain: paid exactly `promised` once, and every record says so. */
  async function expectClaimedOnce(
    s: SignedTestOpen,
    promised: bigint,
    payeeBefore: bigint,
    undone: { blockHash: Hash },
  ) {
    await vi.waitFor(
      async () => {
        expect((await chainState(s.channelId)).claimed).toBe(promised);
        const rows = await claimRows();
        expect(rows.every((r) => r.status !== "broadcast" && r.status !== "queued")).toBe(true);
        const row = await channelRow(s.channelId);
        expect(row?.claim_outbox_id).toBeNull();
      },
      { timeout: 20_000, interval: 50 },
    );
    // Read from the chain: the payee got what the vouchers promise, once.
    expect(await balanceOf(payee.address)).toBe(payeeBefore + promised);
    // The channel's row agrees with the chain.
    const row = await channelRow(s.channelId);
    expect(row?.claimed).toBe(promised.toString());
    expect(row?.claim_error).toBeNull();
    // Every confirmed claim row names a transaction that is on the chain now, in the block it says.
    for (const claim of (await claimRows()).filter((r) => r.status === "confirmed")) {
      const receipt = await receiptOrNull(claim.tx_hash!);
      expect(receipt?.status).toBe("success");
      expect(receipt?.blockHash).not.toBe(undone.blockHash);
      expect(BigInt(claim.block_number!)).toBe(receipt?.blockNumber);
    }
    // Announced once: the `channel.claimed` events add up to what the chain says was claimed, and
    // each names a transaction on the chain now.
    const events = await claimedEvents(s.channelId);
    expect(events.reduce((sum, e) => sum + BigInt(e.data.amount), 0n)).toBe(promised);
    expect(events.at(-1)?.data.cumulativeAmount).toBe(promised.toString());
    for (const e of events) expect((await receiptOrNull(e.data.transaction))?.status).toBe("success");
    return events;
  }

  it("claims again, once, after the claim's block was rolled back", async () => {
    const s = await open();
    const payeeBefore = await balanceOf(payee.address);
    const receipt = await claimRecorded(s, 300_000n);
    await devnet.testClient.request({ method: "anvil_rollback", params: [1] } as never);
    // The rollback undid the claim on chain (or, once the facilitator sent it again, it is in another block).
    const after = await receiptOrNull(receipt.transactionHash);
    expect(after === null || after.blockHash !== receipt.blockHash).toBe(true);
    // The chain goes on: a new head after the rollback.
    await devnet.testClient.request({ method: "evm_mine", params: [] } as never);
    const events = await expectClaimedOnce(s, 300_000n, payeeBefore, receipt);
    expect(events).toHaveLength(1);
  });

  it("claims again, once, after the claim's block was replaced by a reorganisation", async () => {
    const s = await open();
    const payeeBefore = await balanceOf(payee.address);
    const receipt = await claimRecorded(s, 400_000n);
    await devnet.testClient.request({ method: "anvil_reorg", params: [1, []] } as never);
    const after = await receiptOrNull(receipt.transactionHash);
    expect(after === null || after.blockHash !== receipt.blockHash).toBe(true);
    const events = await expectClaimedOnce(s, 400_000n, payeeBefore, receipt);
    expect(events).toHaveLength(1);
  });

  it("pays the newest voucher exactly once when two claims of one channel were reorganised out", async () => {
    const s = await open();
    const payeeBefore = await balanceOf(payee.address);
    const first = await claimRecorded(s, 250_000n);
    const second = await claimRecorded(s, 600_000n);
    expect(second.blockNumber).toBe(first.blockNumber + 1n);
    // Both claims' blocks are replaced by two empty ones.
    await devnet.testClient.request({ method: "anvil_reorg", params: [2, []] } as never);
    expect((await chainState(s.channelId)).claimed).toBeLessThan(600_000n);
    await expectClaimedOnce(s, 600_000n, payeeBefore, first);
  });

  it("closes again, once, after a cooperative close's block was rolled back: the payer refunded once, one channel.closed", async () => {
    const s = await open(1_000_000n);
    const payeeBefore = await balanceOf(payee.address);
    await claimRecorded(s, 150_000n);
    const payerBefore = await balanceOf(payer.address);
    const response = await fetch(`${server.url}/channels/${s.channelId}/close`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
      body: "{}",
    });
    expect(response.status).toBe(200);
    const closedEvents = async () =>
      (
        await store.query<{
          data: { channelId: string; claimed: string; refunded: string; transaction: Hash };
        }>("SELECT data FROM events WHERE type = 'channel.closed' ORDER BY id")
      ).filter((e) => e.data.channelId === s.channelId.toLowerCase());
    // The close's receipt is recorded (its outbox row confirmed, the outcome handled).
    const recorded = await vi.waitFor(
      async () => {
        const rows = await store.query<{ tx_hash: Hash }>(
          `SELECT o.tx_hash FROM tx_outbox o JOIN channel_claim_items i ON i.outbox_id = o.id
           WHERE o.kind = 'channel-close' AND o.status = 'confirmed' AND i.channel_id = $1`,
          [s.channelId.toLowerCase()],
        );
        expect(rows).toHaveLength(1);
        return rows[0]!;
      },
      { timeout: 20_000, interval: 50 },
    );
    const [announced] = await closedEvents();
    expect(announced?.data.transaction).toBe(recorded.tx_hash);
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: recorded.tx_hash });
    expect(await chainState(s.channelId)).toMatchObject({ closed: true, claimed: 150_000n });
    await devnet.testClient.request({ method: "anvil_rollback", params: [1] } as never);
    // The rollback reopened the channel on chain (or the close is back in another block).
    const after = await receiptOrNull(receipt.transactionHash);
    expect(after === null || after.blockHash !== receipt.blockHash).toBe(true);
    // The chain goes on: a new head after the rollback.
    await devnet.testClient.request({ method: "evm_mine", params: [] } as never);
    await vi.waitFor(
      async () => {
        expect((await chainState(s.channelId)).closed).toBe(true);
        const row = (
          await store.query<{ closed: boolean; claim_outbox_id: string | null }>(
            "SELECT closed, claim_outbox_id::text AS claim_outbox_id FROM channels WHERE channel_id = $1",
            [s.channelId.toLowerCase()],
          )
        )[0];
        expect(row).toEqual({ closed: true, claim_outbox_id: null });
      },
      { timeout: 20_000, interval: 50 },
    );
    // Read from the chain: the payee got the voucher, the payer the rest, each once.
    expect(await chainState(s.channelId)).toMatchObject({ closed: true, claimed: 150_000n });
    expect(await balanceOf(payee.address)).toBe(payeeBefore + 150_000n);
    expect(await balanceOf(payer.address)).toBe(payerBefore + 850_000n);
    // Announced once, naming a transaction on the chain now.
    const events = await closedEvents();
    expect(events).toHaveLength(1);
    expect(events[0]?.data).toMatchObject({ claimed: "150000", refunded: "850000" });
    expect((await receiptOrNull(events[0]!.data.transaction))?.status).toBe("success");
    const close = (
      await store.query<{ status: string; tx_hash: Hash; block_number: string }>(
        "SELECT status, tx_hash, block_number::text AS block_number FROM tx_outbox WHERE kind = 'channel-close' ORDER BY id DESC LIMIT 1",
      )
    )[0]!;
    expect(close.status).toBe("confirmed");
    expect(BigInt(close.block_number)).toBe((await receiptOrNull(close.tx_hash))?.blockNumber);
  });
});
