import { getAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signTestPayment } from "../../../test/support/facilitatorHarness.ts";
import { type Devnet, startDevnet } from "../../chain/startDevnet.ts";
import { systemClock } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
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
