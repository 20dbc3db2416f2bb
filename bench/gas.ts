/**
 * Gas of settling one-time payments: one EIP-3009 transferWithAuthorization in its own transaction versus
 * one item of a 100-item BatchSettler.settle. Every payer is a distinct account, so the batch gains
 * nothing from storage slots warmed by an earlier item; the payee already holds a balance in both cases.
 *
 *   npx tsx bench/gas.ts
 */
import { keccak256, stringToBytes } from "viem";
import {
  decodeSettlerEvents,
  type SettlementItem,
  settle,
  signTransferAuthorization,
  startDevnet,
  type TransferAuthorization,
  transferWithAuthorization,
} from "../src/chain/index.ts";

const BATCH = 100;

const devnet = await startDevnet({ accounts: BATCH + 3 });
try {
  const relayer = devnet.walletClient(devnet.deployer);
  const payee = devnet.accounts[1]!.address;
  const domain = {
    name: "USD Coin",
    version: "2",
    chainId: devnet.chain.id,
    verifyingContract: devnet.contracts.usd,
  };
  const validBefore = (await devnet.publicClient.getBlock()).timestamp + 3600n;

  async function signed(payerIndex: number, memo: string): Promise<SettlementItem> {
    const payer = devnet.accounts[payerIndex]!;
    const authorization: TransferAuthorization = {
      from: payer.address,
      to: payee,
      value: 500_000n,
      validAfter: 0n,
      validBefore,
      nonce: keccak256(stringToBytes(memo)),
    };
    return {
      authorization,
      signature: await signTransferAuthorization(payer.account, { domain, authorization }),
    };
  }

  const single = await signed(2, "bench-single");
  const singleReceipt = await devnet.publicClient.waitForTransactionReceipt({
    hash: await transferWithAuthorization(relayer, { token: devnet.contracts.usd, ...single }),
  });

  const items: SettlementItem[] = [];
  for (let i = 0; i < BATCH; i++) items.push(await signed(3 + i, `bench-batch-${i}`));
  const batchReceipt = await devnet.publicClient.waitForTransactionReceipt({
    hash: await settle(relayer, {
      settler: devnet.contracts.batchSettler,
      token: devnet.contracts.usd,
      items,
    }),
  });
  if (singleReceipt.status !== "success" || batchReceipt.status !== "success")
    throw new Error("a settlement failed");
  // A failed item costs less than a settled one, so the per-item figure counts only if all settled.
  const outcomes = decodeSettlerEvents(batchReceipt.logs);
  const settled = outcomes.filter((o) => o.ok).length;
  if (outcomes.length !== BATCH || settled !== BATCH)
    throw new Error(`only ${settled} of ${BATCH} batch items settled`);

  const perItem = batchReceipt.gasUsed / BigInt(BATCH);
  console.log(`transferWithAuthorization, one per transaction: ${singleReceipt.gasUsed} gas`);
  console.log(`BatchSettler.settle of ${BATCH}: ${batchReceipt.gasUsed} gas, ${perItem} gas per item`);
  console.log(
    `ratio single / batched item: ${(Number(singleReceipt.gasUsed) / Number(perItem)).toFixed(2)}x`,
  );
} finally {
  await devnet.stop();
}
