/**
 * `confirmations` decides when a payment counts as settled and its proof is issued (docs/going-live.md,
 * "What a proof promises"). On an automining devnet running Circle's USDC with `confirmations: 2`, the
 * settlement is mined at once in its own block; the proof waits until a second block is on top of it
 * (mined here with `evm_mine`), and names the block the settlement is in.
 *
 * The facilitator reads the chain through a loopback JSON-RPC proxy that counts its calls: the test
 * knows the facilitator has looked at the chain since the settlement was mined before it asserts that no
 * proof was issued, without sleeping.
 */
import type { Hash } from "viem";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { type RpcFaultProxy, startRpcFaultProxy } from "./support/rpcFaultProxy.ts";

describe("a proof with confirmations: 2", { timeout: 60_000 }, () => {
  let devnet: Devnet;
  let proxy: RpcFaultProxy;
  let tf: TestFacilitator;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 4 });
    proxy = await startRpcFaultProxy(devnet.rpcUrl);
    tf = await startTestFacilitator(devnet, { rpcUrl: proxy.url, confirmations: 2 });
  }, 60_000);
  afterAll(async () => {
    await tf?.stop();
    await proxy?.close();
    await devnet?.stop();
  });

  const paymentRow = async (nonce: string) =>
    (
      await tf.store.query<{ status: string; proof: unknown; tx_hash: Hash | null }>(
        "SELECT status, proof, tx_hash FROM payments WHERE nonce = $1",
        [nonce.toLowerCase()],
      )
    )[0];

  it("is not issued while the settlement is one block deep, and is issued once a second block holds it", async () => {
    const payment = await signTestPayment(devnet, devnet.accounts[1]!, {
      payTo: devnet.accounts[2]!.address,
      amount: 250_000n,
    });
    const start = await devnet.publicClient.getBlockNumber();
    let answered = false;
    const authorized = tf.facilitator.engine.authorize(payment).finally(() => {
      answered = true;
    });
    // The batch is mined at once (automine), in the block after `start`.
    const mined = await vi.waitFor(
      async () => {
        const hash = (
          await tf.store.query<{ tx_hash: Hash | null }>(
            "SELECT tx_hash FROM tx_outbox WHERE kind = 'settlement' ORDER BY id DESC LIMIT 1",
          )
        )[0]?.tx_hash;
        expect(hash).toBeTruthy();
        return devnet.publicClient.getTransactionReceipt({ hash: hash! });
      },
      { timeout: 20_000, interval: 20 },
    );
    expect(mined.blockNumber).toBe(start + 1n);
    // The facilitator has read the head three more times since, and seen the receipt.
    const polls = () => proxy.calls.get("eth_blockNumber") ?? 0;
    const seen = polls();
    await vi.waitFor(
      () => {
        expect(polls()).toBeGreaterThanOrEqual(seen + 3);
        expect(proxy.calls.get("eth_getTransactionReceipt") ?? 0).toBeGreaterThan(0);
      },
      { timeout: 20_000, interval: 20 },
    );
    // One block deep: not settled, no proof.
    expect(await devnet.publicClient.getBlockNumber()).toBe(mined.blockNumber);
    expect(answered).toBe(false);
    const pending = await paymentRow(payment.authorization.nonce);
    expect(pending?.status).not.toBe("settled");
    expect(pending?.proof ?? null).toBeNull();

    // A second block on top of it: the proof is issued, naming the settlement's transaction.
    await devnet.testClient.request({ method: "evm_mine", params: [] } as never);
    const { proof, row } = await authorized;
    expect(row.status).toBe("settled");
    expect(proof.tx).toBe(mined.transactionHash);
    expect(BigInt(row.block_number!)).toBe(mined.blockNumber);
    expect((await paymentRow(payment.authorization.nonce))?.proof).not.toBeNull();
  });
});
