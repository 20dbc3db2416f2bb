/**
 * One payer must not sink a settlement batch, and a payment settled on chain by a
 * third party before the facilitator's batch is recognised. Real devnet, real facilitator and store;
 * hostile wallets are the suite's own contracts (test/fixtures/contracts/HostileSettlement.sol).
 *
 * To put a hostile payer in the same batch as honest ones, mining is paused: a first payment's batch
 * stays in the mempool, so the next ten gather into one batch (maxBatchSize 10), which is broadcast and
 * then mined together with whatever the test does in between (a delegation, a third party's transfer).
 */
import { type Address, concat, type Hash, type Hex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { deployContract, writeContract } from "viem/actions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { batchSettlerAbi } from "../../src/chain/contracts/artifacts/BatchSettler.ts";
import { fiatTokenV2_2Abi } from "../../src/chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import {
  signTransferAuthorization,
  type TransferAuthorization,
} from "../../src/chain/signers/signTransferAuthorization.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { findPaymentByNonce } from "../../src/facilitator/paymentRecords.ts";
import { PaymentProofSchema } from "../../src/protocol/paymentProof.ts";
import type { SignedPayment } from "../../src/protocol/signedPayment.ts";
import { compileFixtureContracts } from "../fixtures/compileFixtureContracts.ts";
import { legacyBatchSettlerBytecode } from "../fixtures/legacyBatchSettler.ts";
import {
  signTestPayment,
  startTestFacilitator,
  type TestFacilitator,
} from "../support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let gasAccount: DevnetAccount;
let payTo: DevnetAccount;
let blockerPayer: DevnetAccount;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
  gasAccount = devnet.accounts[4]!;
  payTo = devnet.accounts[2]!;
  blockerPayer = devnet.accounts[1]!;
  tf = await startTestFacilitator(devnet, {
    gasAccount,
    settlement: { maxBatchSize: 10, lingerMs: 120_000, authorizeTimeoutMs: 120_000 },
  });
});

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

type Outcome = {
  status: number;
  body: { proof?: unknown; settled?: { transaction: Hash }; error?: { code: string } };
};

async function authorize(facilitator: TestFacilitator, signedPayment: SignedPayment): Promise<Outcome> {
  const response = await fetch(`${facilitator.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
  return { status: response.status, body: (await response.json()) as Outcome["body"] };
}

/** Waits (polling the store) until every payment has the status; fails after ~60 s. */
async function untilStatus(facilitator: TestFacilitator, payments: SignedPayment[], status: string) {
  for (let i = 0; i < 3_000; i++) {
    const rows = await Promise.all(
      payments.map((p) => findPaymentByNonce(facilitator.store, p.authorization.nonce)),
    );
    if (rows.every((r) => r?.status === status)) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`payments never reached status ${status}`);
}

async function untilRow(facilitator: TestFacilitator, payment: SignedPayment) {
  for (let i = 0; i < 3_000; i++) {
    if ((await findPaymentByNonce(facilitator.store, payment.authorization.nonce)) !== undefined) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error("the payment was never queued");
}

/**
 * Sends `payments` so that they settle in one batch: mining is paused while a blocker payment's batch
 * is in flight (for more than one payment), the payments are authorized in order (each row exists before the next is sent, so batch
 * order is send order), `between` runs once their batch is broadcast, then one block mines everything.
 */
async function settleTogether(
  facilitator: TestFacilitator,
  payments: SignedPayment[],
  between?: () => Promise<void>,
): Promise<Outcome[]> {
  await devnet.testClient.setAutomine(false);
  const pending: Promise<Outcome>[] = [];
  try {
    // One payment is sent at once when nothing is in flight; several need a blocker to gather behind.
    if (payments.length > 1) {
      const blocker = await signTestPayment(devnet, blockerPayer, { payTo: payTo.address, amount: 100_000n });
      pending.push(authorize(facilitator, blocker));
      await untilStatus(facilitator, [blocker], "submitted");
    }
    for (const payment of payments) {
      pending.push(authorize(facilitator, payment));
      await untilRow(facilitator, payment);
    }
    await untilStatus(facilitator, payments, "submitted");
    await between?.();
    await devnet.testClient.mine({ blocks: 1 });
  } finally {
    await devnet.testClient.setAutomine(true);
  }
  const outcomes = await Promise.all(pending);
  return payments.length > 1 ? outcomes.slice(1) : outcomes;
}

async function freshPayer(usd = 1_000_000n): Promise<DevnetAccount> {
  const privateKey = generatePrivateKey();
  const account = privateKeyToAccount(privateKey);
  await devnet.fund(account.address, { usd });
  return { address: account.address, privateKey, account };
}

async function honestPayments(count: number): Promise<SignedPayment[]> {
  const payments: SignedPayment[] = [];
  for (let i = 0; i < count; i++) {
    payments.push(
      await signTestPayment(devnet, await freshPayer(), { payTo: payTo.address, amount: 200_000n }),
    );
  }
  return payments;
}

async function deployFixture(name: string, args: readonly unknown[] = []): Promise<Address> {
  const { abi, bytecode } = compileFixtureContracts("HostileSettlement.sol")[name]!;
  const hash = await deployContract(devnet.walletClient(devnet.deployer), { abi, bytecode, args });
  return (await devnet.publicClient.waitForTransactionReceipt({ hash })).contractAddress!;
}

/** Delegates `eoa` to `target` with a real EIP-7702 transaction, sent (and paid for) by the deployer. */
async function delegate(eoa: DevnetAccount, target: Address, options: { mined: boolean }): Promise<void> {
  const authorization = await devnet.walletClient(eoa).signAuthorization({ contractAddress: target });
  const hash = await devnet.walletClient(devnet.deployer).sendTransaction({
    to: devnet.deployer.address,
    authorizationList: [authorization],
    // Ahead of the facilitator's batch in the block both land in.
    maxPriorityFeePerGas: 5_000_000_000_000n,
    maxFeePerGas: 10_000_000_000_000n,
  });
  if (options.mined) await devnet.publicClient.waitForTransactionReceipt({ hash });
}

/**
 * Submits a signed authorization directly to the token, outbidding the facilitator's batch by far: the
 * facilitator takes the node's suggested tip, which follows the tips of recent blocks, and an earlier
 * test's bid in this file can raise it to that bid (a tie then goes to the batch, which arrived first).
 */
function submitDirectly(from: DevnetAccount, authorization: TransferAuthorization, signature: Hex) {
  const a = authorization;
  return writeContract(devnet.walletClient(from), {
    address: devnet.contracts.usd,
    abi: fiatTokenV2_2Abi,
    functionName: "transferWithAuthorization",
    args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature],
    gas: 200_000n,
    maxPriorityFeePerGas: 50_000_000_000n,
    maxFeePerGas: 100_000_000_000n,
  });
}

const balance = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function gasUsedBy(hash: Hash): Promise<bigint> {
  return (await devnet.publicClient.getTransactionReceipt({ hash })).gasUsed;
}

describe("a payer whose wallet burns gas", () => {
  it("fails alone when its wallet is valid at preflight and burns gas in the batch; nine payments settle in that batch", async () => {
    // An EOA delegated (before it pays) to an ERC-1271 wallet that accepts its key's signatures, except in
    // transactions sent by the facilitator's gas account: the preflight simulation passes.
    const wallet = await deployFixture("GasBurningWallet", [
      "0x0000000000000000000000000000000000000000",
      gasAccount.address,
    ]);
    const hostile = await freshPayer();
    await delegate(hostile, wallet, { mined: true });
    const hostilePayment = await signTestPayment(devnet, hostile, { payTo: payTo.address, amount: 200_000n });
    const honest = await honestPayments(9);
    const payeeBefore = await balance(payTo.address);

    const [bad, ...good] = await settleTogether(tf, [hostilePayment, ...honest]);

    expect(good.map((o) => o.status)).toEqual(Array(9).fill(200));
    expect(bad!.status).toBeGreaterThanOrEqual(400);
    expect(bad!.body.error?.code).toBe("InvalidSignature");
    const transactions = new Set(good.map((o) => o.body.settled?.transaction));
    expect(transactions.size).toBe(1);
    // Nine transfers at ~47 000 each and one item capped at 150 000 (the hostile wallet made a 10-item
    // batch need 10.9M gas before).
    expect(await gasUsedBy([...transactions][0]!)).toBeLessThan(800_000n);
    expect(await balance(payTo.address)).toBe(payeeBefore + 100_000n + 9n * 200_000n);
    expect(await balance(hostile.address)).toBe(1_000_000n);
  }, 120_000);

  it("fails alone when the payer delegates its EOA to a gas-burning contract after the preflight", async () => {
    const burner = await deployFixture("GasBurningDelegate");
    const hostile = await freshPayer();
    const hostilePayment = await signTestPayment(devnet, hostile, { payTo: payTo.address, amount: 200_000n });
    const honest = await honestPayments(9);

    const [bad, ...good] = await settleTogether(tf, [hostilePayment, ...honest], async () => {
      // Preflight passed with a plain EOA; the delegation lands in the batch's block, ahead of it.
      await delegate(hostile, burner, { mined: false });
    });

    expect(await devnet.publicClient.getCode({ address: hostile.address })).toBe(
      concat(["0xef0100", burner]).toLowerCase(),
    );
    expect(good.map((o) => o.status)).toEqual(Array(9).fill(200));
    expect(bad!.body.error?.code).toBe("InvalidSignature");
    expect(new Set(good.map((o) => o.body.settled?.transaction)).size).toBe(1);
    expect(await gasUsedBy(good[0]!.body.settled!.transaction)).toBeLessThan(800_000n);
    // Sent again, it is refused at the preflight: the simulation runs out of the per-item gas.
    const again = await authorize(tf, hostilePayment);
    expect([again.status, again.body.error?.code]).toEqual([422, "InvalidSignature"]);
  }, 120_000);

  it("is isolated by splitting reverted batches, and checked again before a retry, on a settler without gas caps", async () => {
    // An operator who has not redeployed BatchSettler: there the hostile item reverts the whole batch.
    const hash = await deployContract(devnet.walletClient(devnet.deployer), {
      abi: batchSettlerAbi,
      bytecode: legacyBatchSettlerBytecode,
    });
    const legacy = (await devnet.publicClient.waitForTransactionReceipt({ hash })).contractAddress!;
    const legacyGas = devnet.accounts[3]!;
    const legacyFacilitator = await startTestFacilitator(devnet, {
      gasAccount: legacyGas,
      settlement: { maxBatchSize: 10, lingerMs: 120_000, authorizeTimeoutMs: 120_000 },
      batchSettler: legacy,
    });
    try {
      const wallet = await deployFixture("GasBurningWallet", [
        "0x0000000000000000000000000000000000000000",
        legacyGas.address,
      ]);
      const burner = await deployFixture("GasBurningDelegate");
      const sneaky = await freshPayer(); // burns only in the facilitator's transactions
      await delegate(sneaky, wallet, { mined: true });
      const late = await freshPayer(); // delegates to a burner after the preflight
      const payments = [
        await signTestPayment(devnet, sneaky, { payTo: payTo.address, amount: 200_000n }),
        await signTestPayment(devnet, late, { payTo: payTo.address, amount: 200_000n }),
        ...(await honestPayments(8)),
      ];
      const outcomes = await settleTogether(legacyFacilitator, payments, () =>
        delegate(late, burner, { mined: false }),
      );
      expect(outcomes.slice(2).map((o) => o.status)).toEqual(Array(8).fill(200));
      expect(outcomes[0]!.status).toBeGreaterThanOrEqual(400);
      // The late delegation is caught by the re-check's simulation, without another batch.
      expect(outcomes[1]!.body.error?.code).toBe("InvalidSignature");
      const late_ = await findPaymentByNonce(legacyFacilitator.store, payments[1]!.authorization.nonce);
      expect(late_?.attempts).toBe(1);
    } finally {
      await legacyFacilitator.stop();
    }
  }, 120_000);
});

describe("a payment settled on chain by a third party first", () => {
  it("is recorded settled with the third party's transaction, and its proof is issued", async () => {
    const payer = await freshPayer();
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 300_000n });
    const payeeBefore = await balance(payTo.address);
    let thirdParty: Hash | undefined;
    const [outcome] = await settleTogether(tf, [payment], async () => {
      // A watcher submits the same signed authorization itself, ahead of the facilitator's batch.
      const a = payment.authorization;
      thirdParty = await submitDirectly(
        devnet.accounts[3]!,
        {
          from: a.from,
          to: a.to,
          value: BigInt(a.value),
          validAfter: BigInt(a.validAfter),
          validBefore: BigInt(a.validBefore),
          nonce: a.nonce,
        },
        payment.signature,
      );
    });
    expect(outcome!.status).toBe(200);
    const proof = PaymentProofSchema.parse(outcome!.body.proof);
    expect(proof.tx).toBe(thirdParty);
    expect(outcome!.body.settled?.transaction).toBe(thirdParty);
    // Paid once, by the third party's transaction.
    expect(await balance(payTo.address)).toBe(payeeBefore + 300_000n);
    expect(await balance(payer.address)).toBe(700_000n);
    const row = await findPaymentByNonce(tf.store, payment.authorization.nonce);
    expect([row?.status, row?.tx_hash]).toEqual(["settled", thirdParty]);
  });

  it("fails when the nonce was used by another transfer the payer signed, not this payment", async () => {
    const payer = await freshPayer();
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 300_000n });
    const other = devnet.accounts[3]!;
    const outcomes = await settleTogether(tf, [payment], async () => {
      // Same nonce, different payee: the payer spends the nonce on a transfer to itself elsewhere.
      const authorization: TransferAuthorization = {
        from: payer.address,
        to: other.address,
        value: 1n,
        validAfter: 0n,
        validBefore: BigInt(payment.authorization.validBefore),
        nonce: payment.authorization.nonce as Hex,
      };
      const signature = await signTransferAuthorization(payer.account, {
        domain: {
          name: devnet.token.name,
          version: devnet.token.version,
          chainId: devnet.chain.id,
          verifyingContract: devnet.contracts.usd,
        },
        authorization,
      });
      await submitDirectly(other, authorization, signature);
    });
    expect([outcomes[0]!.status, outcomes[0]!.body.error?.code]).toEqual([409, "NonceAlreadyUsed"]);
    expect(outcomes[0]!.body.proof).toBeUndefined();
  });
});
