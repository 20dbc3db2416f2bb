import { getAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signTestPayment } from "../../../test/support/facilitatorHarness.ts";
import { transferWithAuthorization } from "../../chain/actions/usd/transferWithAuthorization.ts";
import { type Devnet, startDevnet } from "../../chain/startDevnet.ts";
import { systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import type { PaymentRow } from "../paymentRecords.ts";
import { createPaymentChecks, type PaymentCheckClient } from "./paymentChecks.ts";

const PAY_TO = getAddress("0x000000000000000000000000000000000000c0de");
let devnet: Devnet;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
});

afterAll(async () => {
  await devnet?.stop();
});

/** The checks over the devnet's client, with the block of each simulation recorded. */
function checksRecordingBlocks() {
  const blocks: unknown[] = [];
  const base = devnet.publicClient;
  const client: PaymentCheckClient = {
    ...base,
    simulateContract: ((args: { blockTag?: unknown }) => {
      blocks.push(args.blockTag);
      return (base.simulateContract as (a: unknown) => unknown)(args);
    }) as unknown as PaymentCheckClient["simulateContract"],
  };
  const checks = createPaymentChecks({
    client,
    network: devnet.network,
    tokens: new Map(),
    batchSettler: devnet.contracts.batchSettler,
    clock: systemClock,
  });
  return { checks, blocks };
}

describe("the simulation before a payment is queued", () => {
  it("runs on the latest block", async () => {
    const { checks, blocks } = checksRecordingBlocks();
    await checks.simulate(
      await signTestPayment(devnet, devnet.accounts[1]!, { payTo: PAY_TO, amount: 10_000n }),
    );
    expect(blocks).toEqual(["latest"]);
  });

  it("runs again on the pending block when the latest one is not past the authorization's validAfter", async () => {
    const { checks, blocks } = checksRecordingBlocks();
    const latest = (await devnet.publicClient.getBlock()).timestamp;
    // The next block (the pending one) is a minute on; the latest is before the authorization's window.
    await devnet.testClient.setNextBlockTimestamp({ timestamp: latest + 60n });
    const payment = await signTestPayment(devnet, devnet.accounts[1]!, {
      payTo: PAY_TO,
      amount: 10_000n,
      validAfter: latest + 30n,
      validBefore: latest + 900n,
    });
    await checks.simulate(payment);
    expect(blocks).toEqual(["latest", "pending"]);
  });

  it("refuses on the latest block alone when the transfer fails for another reason", async () => {
    const { checks, blocks } = checksRecordingBlocks();
    const payment = await signTestPayment(devnet, devnet.accounts[2]!, {
      payTo: PAY_TO,
      amount: 10_000n,
      value: 10n ** 30n,
    });
    const refusal = await checks.simulate(payment).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(TollgateError);
    expect((refusal as TollgateError).code).toBe("InsufficientFunds");
    expect(blocks).toEqual(["latest"]);
  });
});

describe("where a payment's nonce went on chain", () => {
  /** The payment settled on chain by someone's transferWithAuthorization; the block before it. */
  async function settledOnChain() {
    const payment = await signTestPayment(devnet, devnet.accounts[1]!, { payTo: PAY_TO, amount: 10_000n });
    const before = await devnet.publicClient.getBlockNumber();
    const a = payment.authorization;
    const hash = await transferWithAuthorization(devnet.walletClient(devnet.accounts[2]!), {
      token: payment.token,
      authorization: {
        from: a.from,
        to: a.to,
        value: BigInt(a.value),
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
        nonce: a.nonce,
      },
      signature: payment.signature,
    });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
    const row = {
      token: payment.token.toLowerCase(),
      payer: a.from.toLowerCase(),
      pay_to: a.to.toLowerCase(),
      nonce: a.nonce,
      amount: BigInt(a.value),
    } as PaymentRow;
    return { row, hash, before };
  }

  it("matches the transfer that used it", async () => {
    const { row, hash } = await settledOnChain();
    const { checks } = checksRecordingBlocks();
    expect(await checks.onChainUse(row)).toMatchObject({ kind: "matched", hash });
  });

  it("calls it unused, not used by something else, when the head read after it no longer holds the use", async () => {
    const { row, before } = await settledOnChain();
    // The use is read as made, then the head comes back below its block (a reorganisation took it back
    // between the two reads): no log of it up to that head, and at that head the nonce is free.
    const client: PaymentCheckClient = { ...devnet.publicClient, getBlockNumber: async () => before };
    const checks = createPaymentChecks({
      client,
      network: devnet.network,
      tokens: new Map(),
      batchSettler: devnet.contracts.batchSettler,
      clock: systemClock,
    });
    expect(await checks.onChainUse(row)).toEqual({ kind: "unused" });
  });
});
