/**
 * Gas of SubscriptionManager renewals and metered deductions: one `collect` in its own transaction
 * versus one item of a 50-item `collectMany`, and one item of a 50-item `deductAllowanceMany`. Every
 * subscriber is a distinct account (no storage warmed by an earlier item); the provider already holds a
 * balance. The token is Circle's FiatToken v2.2 (USDC); the first line says which, at which address.
 *
 *   npx tsx bench/subscriptionGas.ts
 */
import { keccak256, maxUint256, stringToBytes } from "viem";
import {
  approveToken,
  collect,
  collectMany,
  createPlan,
  deductAllowanceMany,
  getPlanIdFromReceipt,
  getSubscriptionIdFromReceipt,
  setOperator,
  startDevnet,
  subscribe,
} from "../src/chain/index.ts";
import { benchToken, describeBenchToken } from "./support/benchToken.ts";

const BATCH = 50;
const INTERVAL = 30n * 86_400n;

const devnet = await startDevnet({ accounts: BATCH + 4, token: "usdc" });
try {
  console.log(describeBenchToken(benchToken(devnet)));
  const manager = devnet.contracts.subscriptionManager;
  const provider = devnet.accounts[1]!;
  const wait = (hash: `0x${string}`) => devnet.publicClient.waitForTransactionReceipt({ hash });
  const planId = getPlanIdFromReceipt(
    await wait(
      await createPlan(devnet.walletClient(provider), {
        manager,
        token: devnet.contracts.usd,
        amount: 9_000_000n,
        interval: INTERVAL,
        includedUnits: 0n,
        overageUnitPrice: 1n,
      }),
    ),
  );
  await wait(
    await setOperator(devnet.walletClient(provider), { manager, operator: provider.address, allowed: true }),
  );
  const ids: bigint[] = [];
  for (let i = 0; i < BATCH + 1; i++) {
    const who = devnet.walletClient(devnet.accounts[3 + i]!);
    await wait(
      await approveToken(who, { token: devnet.contracts.usd, spender: manager, amount: maxUint256 }),
    );
    ids.push(
      getSubscriptionIdFromReceipt(
        await wait(await subscribe(who, { manager, planId, maxOverage: 1_000_000n })),
      ),
    );
  }
  await devnet.advanceTime(INTERVAL);
  const stranger = devnet.walletClient(devnet.accounts[2]!);
  const single = await wait(await collect(stranger, { manager, subscriptionId: ids[0]! }));
  const batch = await wait(await collectMany(stranger, { manager, subscriptionIds: ids.slice(1) }));
  const deductions = await wait(
    await deductAllowanceMany(devnet.walletClient(provider), {
      manager,
      subscriptionIds: ids.slice(1),
      amounts: ids.slice(1).map(() => 1_000n),
      refs: ids.slice(1).map((id) => keccak256(stringToBytes(`bench-${id}`))),
    }),
  );
  for (const r of [single, batch, deductions]) if (r.status !== "success") throw new Error("a call reverted");
  console.log(`collect, one per transaction: ${single.gasUsed} gas`);
  console.log(`collectMany of ${BATCH}: ${batch.gasUsed} gas, ${batch.gasUsed / BigInt(BATCH)} gas per item`);
  console.log(
    `deductAllowanceMany of ${BATCH}: ${deductions.gasUsed} gas, ${deductions.gasUsed / BigInt(BATCH)} gas per item`,
  );
} finally {
  await devnet.stop();
}
