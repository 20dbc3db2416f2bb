/**
 * A one-time settlement batch undone by a chain reorganisation, on a devnet running Circle's USDC: the
 * payment settled and its proof was issued, then the block holding the batch was rolled back
 * (`anvil_rollback`) or replaced by another (`anvil_reorg`). The facilitator notices that the batch's
 * transaction left the chain, sends it again, and the payment ends settled exactly once: the payee paid
 * once on chain, the authorization used, the row settled in the new block, and one `payment.settled`.
 */
import { type Address, encodeFunctionData, erc20Abi, type Hash, type Hex, toHex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { getAuthorizationState } from "../src/chain/actions/usd/getAuthorizationState.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { fiatTokenV2_2Abi } from "../src/chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const amount = 500_000n;

describe("facilitator after a reorganisation undid a settlement batch", () => {
  let devnet: Devnet;
  let tf: TestFacilitator;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 6 });
    tf = await startTestFacilitator(devnet, { settlement: { reorgCheckIntervalMs: 50 } });
  }, 60_000);
  afterAll(async () => {
    await tf?.stop();
    await devnet?.stop();
  });

  const balanceOf = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const paymentRow = async (nonce: string) =>
    (
      await tf.store.query<{ status: string; tx_hash: Hash | null; block_number: string | null }>(
        "SELECT status, tx_hash, block_number FROM payments WHERE nonce = $1",
        [nonce.toLowerCase()],
      )
    )[0];
  const settledEvents = async (nonce: string) =>
    (
      await tf.store.query<{ data: { nonce: string } }>(
        "SELECT data FROM events WHERE type = 'payment.settled'",
      )
    ).filter((e) => e.data.nonce === nonce.toLowerCase());
  const receiptOrNull = (hash: Hash) => devnet.publicClient.getTransactionReceipt({ hash }).catch(() => null);

  async function settleOnce(payer = devnet.accounts[1]!) {
    const { payment, ...rest } = await settlePayment(payer);
    return rest;
  }

  async function settlePayment(payer = devnet.accounts[1]!) {
    const payee = devnet.accounts[2];
    const payment = await signTestPayment(devnet, payer!, { payTo: payee!.address, amount });
    const before = { payer: await balanceOf(payer!.address), payee: await balanceOf(payee!.address) };
    const { proof } = await tf.facilitator.engine.authorize(payment);
    const nonce = payment.authorization.nonce;
    const first = await paymentRow(nonce);
    expect(first?.status).toBe("settled");
    expect(proof.tx).toBe(first?.tx_hash);
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: first!.tx_hash! });
    expect(await balanceOf(payee!.address)).toBe(before.payee + amount);
    return { payer, payee: payee!, nonce, before, receipt, payment };
  }

  async function expectSettledAgainOnce(
    settled: Awaited<ReturnType<typeof settleOnce>>,
    undone: { blockHash: Hash },
  ) {
    const { payer, payee, nonce, before } = settled;
    // Settled again by a transaction that is on the chain now, in a block the reorganisation made.
    await vi.waitFor(
      async () => {
        const row = await paymentRow(nonce);
        expect(row?.status).toBe("settled");
        const receipt = await receiptOrNull(row!.tx_hash!);
        expect(receipt?.status).toBe("success");
        expect(receipt?.blockHash).not.toBe(undone.blockHash);
        expect(BigInt(row!.block_number!)).toBe(receipt?.blockNumber);
      },
      { timeout: 20_000, interval: 50 },
    );
    // Paid exactly once, on chain.
    expect(await balanceOf(payee.address)).toBe(before.payee + amount);
    expect(await balanceOf(payer.address)).toBe(before.payer - amount);
    expect(
      await getAuthorizationState(devnet.publicClient, {
        token: devnet.contracts.usd,
        authorizer: payer.address,
        nonce: nonce as Hex,
      }),
    ).toBe(true);
    // Announced once: the provider's webhook and analytics count the payment one time, and so does
    // the settled-payments metric.
    expect(await settledEvents(nonce)).toHaveLength(1);
    const metrics = await (await fetch(`${tf.url}/metrics`)).text();
    const counted = metrics
      .split("\n")
      .filter((l) => l.startsWith("tollgate_payments_settled_total{"))
      .reduce((sum, l) => sum + Number(l.split(" ").at(-1)), 0);
    const rows = await tf.store.query<{ n: string }>(
      "SELECT count(*) AS n FROM payments WHERE status = 'settled'",
    );
    expect(counted).toBe(Number(rows[0]!.n));
    // The operator sees the reopened batch counted.
    const reopened = metrics
      .split("\n")
      .find((l) => l.startsWith('tollgate_reorg_reopened_total{kind="settlement"}'));
    expect(Number(reopened?.split(" ").at(-1))).toBeGreaterThan(0);
    const proofNow = await tf.facilitator.engine.getPayment(nonce);
    expect(proofNow?.proof).not.toBeNull();
  }

  it("settles a batch again, once, after its block was rolled back", async () => {
    const settled = await settleOnce();
    await devnet.testClient.request({ method: "anvil_rollback", params: [1] } as never);
    // The rollback undid the payment on chain: its receipt is gone (or, once the facilitator sent the
    // transaction again, in another block).
    const after = await receiptOrNull(settled.receipt.transactionHash);
    expect(after === null || after.blockHash !== settled.receipt.blockHash).toBe(true);
    await expectSettledAgainOnce(settled, settled.receipt);
  }, 60_000);

  it("settles a batch again, once, after its block was replaced by a reorganisation", async () => {
    const settled = await settleOnce();
    await devnet.testClient.request({ method: "anvil_reorg", params: [1, []] } as never);
    const after = await receiptOrNull(settled.receipt.transactionHash);
    // The block at the batch's height is another one now, without the batch.
    expect(after === null || after.blockHash !== settled.receipt.blockHash).toBe(true);
    await expectSettledAgainOnce(settled, settled.receipt);
  }, 60_000);

  it("settles a payment by the transaction that used its authorization on the new chain, announced once", async () => {
    const { payment, ...settled } = await settlePayment();
    const a = payment.authorization;
    // The block is replaced by one in which a third party submits the very same authorization.
    const thirdParty = {
      from: devnet.accounts[5]!.address,
      to: devnet.contracts.usd,
      data: encodeFunctionData({
        abi: fiatTokenV2_2Abi,
        functionName: "transferWithAuthorization",
        args: [
          a.from,
          a.to,
          BigInt(a.value),
          BigInt(a.validAfter),
          BigInt(a.validBefore),
          a.nonce as Hex,
          payment.signature as Hex,
        ],
      }),
      gas: toHex(200_000),
    };
    await devnet.testClient.request({ method: "anvil_reorg", params: [1, [[thirdParty, 0]]] } as never);
    const [replacing] = (
      await devnet.publicClient.getBlock({
        blockNumber: settled.receipt.blockNumber,
        includeTransactions: true,
      })
    ).transactions;
    expect(replacing).toBeDefined();
    await vi.waitFor(
      async () => {
        const row = await paymentRow(settled.nonce);
        expect(row?.status).toBe("settled");
        expect(row?.tx_hash).toBe(typeof replacing === "string" ? replacing : replacing?.hash);
      },
      { timeout: 20_000, interval: 50 },
    );
    expect(await balanceOf(settled.payee.address)).toBe(settled.before.payee + amount);
    expect(await settledEvents(settled.nonce)).toHaveLength(1);
  }, 60_000);

  it("fails a proven payment with payment.failed when the payer emptied the wallet on the new chain", async () => {
    const payer = devnet.accounts[4]!;
    const settled = await settleOnce(payer);
    const balance = await balanceOf(payer.address);
    // The block is replaced by one in which the payer moves every remaining unit away first.
    const emptying = {
      from: payer.address,
      to: devnet.contracts.usd,
      data: encodeFunctionData({
        abi: erc20Abi,
        functionName: "transfer",
        args: [devnet.accounts[0]!.address, balance + amount],
      }),
      gas: toHex(100_000),
    };
    await devnet.testClient.request({ method: "anvil_reorg", params: [1, [[emptying, 0]]] } as never);
    expect(await balanceOf(payer.address)).toBe(0n);
    await vi.waitFor(async () => expect((await paymentRow(settled.nonce))?.status).toBe("failed"), {
      timeout: 20_000,
      interval: 50,
    });
    // Not paid, and the provider who served on the proof is told.
    expect(await balanceOf(settled.payee.address)).toBe(settled.before.payee);
    const failed = (
      await tf.store.query<{ data: { nonce: string } }>(
        "SELECT data FROM events WHERE type = 'payment.failed'",
      )
    ).filter((e) => e.data.nonce === settled.nonce.toLowerCase());
    expect(failed).toHaveLength(1);
    expect(await settledEvents(settled.nonce)).toHaveLength(1);
    expect((await tf.facilitator.engine.getPayment(settled.nonce))?.proof).toBeNull();
  }, 60_000);

  /** Two payments of a payer with the money for one: the second to reach the chain fails, in the newest block. */
  async function oneOfTwoFailed() {
    // Both pass their checks alone; the second to reach the chain finds the wallet empty.
    const key = generatePrivateKey();
    const account = privateKeyToAccount(key);
    const payer = { address: account.address, privateKey: key, account };
    await devnet.fund(payer.address, { usd: amount });
    const payee = devnet.accounts[2]!;
    const payments = await Promise.all([
      signTestPayment(devnet, payer, { payTo: payee.address, amount }),
      signTestPayment(devnet, payer, { payTo: payee.address, amount }),
    ]);
    const before = await balanceOf(payee.address);
    await Promise.allSettled(payments.map((p) => tf.facilitator.engine.authorize(p)));
    const nonces = payments.map((p) => p.authorization.nonce);
    const rows = await Promise.all(nonces.map((n) => paymentRow(n)));
    expect(rows.map((r) => r?.status).sort()).toEqual(["failed", "settled"]);
    // The failing transfer came second: its batch's transaction is in the newest block.
    const failedAt = rows.findIndex((r) => r?.status === "failed");
    const failedNonce = nonces[failedAt]!;
    const undone = await devnet.publicClient.getTransactionReceipt({ hash: rows[failedAt]!.tx_hash! });
    expect(undone.blockNumber).toBe(await devnet.publicClient.getBlockNumber({ cacheTime: 0 }));
    return { payer, payee, before, nonces, failedNonce, undone };
  }

  const failedEvents = async (nonce: string) =>
    (
      await tf.store.query<{ data: { nonce: string } }>(
        "SELECT data FROM events WHERE type = 'payment.failed'",
      )
    ).filter((e) => e.data.nonce === nonce.toLowerCase());

  it("settles on the new chain a payment its undone batch had failed, announcing the failure once and the settlement once", async () => {
    const { payer, payee, before, nonces, failedNonce, undone } = await oneOfTwoFailed();
    // The block is replaced by one in which the payer first receives what the second payment lacked.
    const funding = {
      from: devnet.accounts[3]!.address,
      to: devnet.contracts.usd,
      data: encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [payer.address, amount] }),
      gas: toHex(100_000),
    };
    await devnet.testClient.request({ method: "anvil_reorg", params: [1, [[funding, 0]]] } as never);
    await vi.waitFor(
      async () => {
        for (const nonce of nonces) {
          const row = await paymentRow(nonce);
          expect(row?.status).toBe("settled");
          const receipt = await receiptOrNull(row!.tx_hash!);
          expect(receipt?.status).toBe("success");
          expect(receipt?.blockHash).not.toBe(undone.blockHash);
        }
      },
      { timeout: 20_000, interval: 50 },
    );
    // Both paid once on chain, each announced settled once; the earlier failure is not announced again.
    expect(await balanceOf(payee.address)).toBe(before + 2n * amount);
    expect(await balanceOf(payer.address)).toBe(0n);
    for (const nonce of nonces) expect(await settledEvents(nonce)).toHaveLength(1);
    expect(await failedEvents(failedNonce)).toHaveLength(1);
  }, 60_000);

  it("fails again, announcing it once, a payment its undone batch had failed when the new chain refuses it too", async () => {
    const { payee, before, failedNonce, undone } = await oneOfTwoFailed();
    await devnet.testClient.request({ method: "anvil_rollback", params: [1] } as never);
    // Sent again and failed again by a transaction on the chain now.
    await vi.waitFor(
      async () => {
        const row = await paymentRow(failedNonce);
        expect(row?.status).toBe("failed");
        const receipt = await receiptOrNull(row!.tx_hash!);
        expect(receipt?.status).toBe("success");
        expect(receipt?.blockHash).not.toBe(undone.blockHash);
      },
      { timeout: 20_000, interval: 50 },
    );
    expect(await balanceOf(payee.address)).toBe(before + amount);
    expect(await failedEvents(failedNonce)).toHaveLength(1);
    expect(await settledEvents(failedNonce)).toHaveLength(0);
  }, 60_000);
});
