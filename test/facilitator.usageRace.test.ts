/**
 * Two usage settlers of one gas key over one store (two facilitator instances): a batch one of them
 * claimed and is still checking (operator, token, gas estimate) is not released and sent again by the
 * other. Reconciled against the chain: each record's ref has at most one AllowanceDeducted log, the
 * subscriber's balance moved by the settled records exactly, and every record says settled.
 */
import { type Address, getAbiItem } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getAllowanceDeductedLogs } from "../src/chain/actions/subscriptions/getAllowanceDeductedLogs.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { subscriptionManagerAbi } from "../src/chain/contracts/artifacts/SubscriptionManager.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import {
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
} from "../src/protocol/subscriptions.ts";
import { subscribeThroughFacilitator } from "../src/schemes/subscription/client/facilitatorSubscriptions.ts";
import { chainRefOf, recordUsage } from "../src/schemes/subscription/facilitator/usage/usageRecords.ts";
import { createUsageSettler } from "../src/schemes/subscription/facilitator/usage/usageSettler.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let provider: DevnetAccount;
let planId: bigint;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  provider = devnet.accounts[1]!;
  const created = await createPlan(devnet.walletClient(provider), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: 1_000_000n,
    interval: 30n * 86_400n,
    includedUnits: 10n,
    overageUnitPrice: 1_000n,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash: created }));
  const signer = tf.facilitator.supported.networks[0]?.signers?.[0];
  if (signer === undefined) throw new Error("/supported lists no signer");
  const operator = await setOperator(devnet.walletClient(provider), {
    manager: devnet.contracts.subscriptionManager,
    operator: signer,
    allowed: true,
  });
  await devnet.publicClient.waitForTransactionReceipt({ hash: operator });
}, 120_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

async function subscriber(maxOverage: bigint) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 10_000_000n });
  const client = createFacilitatorClient({ url: tf.url, fetch });
  const { subscriptionId } = await subscribeThroughFacilitator(client, account, {
    planId,
    maxOverage,
    approval: 10_000_000n,
  });
  return { account, subscriptionId };
}

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

/** A public client whose gas estimates wait until `open()`: a settler slow between claim and queue. */
function heldEstimates(): { client: Devnet["publicClient"]; open(): void; reached: Promise<void> } {
  let open!: () => void;
  let reach!: () => void;
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const reached = new Promise<void>((resolve) => {
    reach = resolve;
  });
  const base = devnet.publicClient;
  const client = {
    ...base,
    async estimateContractGas(args: Parameters<typeof base.estimateContractGas>[0]) {
      reach();
      await gate;
      return base.estimateContractGas(args);
    },
  } as Devnet["publicClient"];
  return { client, open, reached };
}

/** How many AllowanceDeducted logs each ref has on chain. */
async function deductionsOnChain(refs: readonly string[]): Promise<number[]> {
  const counts: number[] = [];
  for (const ref of refs) {
    const logs = await getAllowanceDeductedLogs(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      ref: chainRefOf(provider.address, ref),
      fromBlock: 0n,
    });
    counts.push(logs.length);
  }
  return counts;
}

async function recordsOf(store: Store) {
  return store.query<{ ref: string; status: string }>("SELECT ref, status FROM usage_records ORDER BY id");
}

describe("two usage settlers of one gas key over one store", () => {
  for (const variant of [
    { name: "leave a batch the other is checking alone", abandonedAfterMs: undefined },
    { name: "release a batch only if its own queueing then fails", abandonedAfterMs: 0 },
  ]) {
    it(`${variant.name}, and deduct each record once`, { timeout: 120_000 }, async () => {
      const { account, subscriptionId } = await subscriber(1_000_000n);
      const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
      try {
        const ctx = { ...tf.facilitator.context, store };
        const scope = { chainId: ctx.chainId, manager: devnet.contracts.subscriptionManager };
        const refs = Array.from({ length: 6 }, (_, i) => `race-${variant.abandonedAfterMs ?? "x"}-${i}`);
        await recordUsage(
          store,
          scope,
          provider.address,
          refs.map((ref) => ({ subscriptionId, amount: "7000", ref })),
        );
        const before = await balanceOf(account.address);

        const held = heldEstimates();
        const slow = createUsageSettler({ ...ctx, publicClient: held.client });
        const slowRun = slow.runOnce();
        await held.reached;
        const other = createUsageSettler(ctx, { abandonedAfterMs: variant.abandonedAfterMs });
        await other.runOnce();
        held.open();
        await slowRun;
        // Whatever either left open is driven to its outcome.
        await createUsageSettler(ctx).runOnce();

        expect(await deductionsOnChain(refs)).toEqual(refs.map(() => 1));
        expect(await balanceOf(account.address)).toBe(before - 7000n * BigInt(refs.length));
        expect(await recordsOf(store)).toEqual(refs.map((ref) => ({ ref, status: "settled" })));
      } finally {
        await store.close();
      }
    });
  }
});

describe("a batch claimed by an instance that stopped before queueing it", () => {
  it("is released by a running settler once abandoned, with nothing else waking it", {
    timeout: 120_000,
  }, async () => {
    const { account, subscriptionId } = await subscriber(1_000_000n);
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const held = heldEstimates();
    let stuck: Promise<unknown> | undefined;
    const running = createUsageSettler({ ...tf.facilitator.context, store }, { abandonedAfterMs: 2_000 });
    try {
      const scope = {
        chainId: tf.facilitator.context.chainId,
        manager: devnet.contracts.subscriptionManager,
      };
      const refs = ["stuck-0", "stuck-1"];
      await recordUsage(
        store,
        scope,
        provider.address,
        refs.map((ref) => ({ subscriptionId, amount: "3000", ref })),
      );
      const before = await balanceOf(account.address);
      // Claims the records and never gets past its gas estimate (a process frozen or dead there).
      stuck = createUsageSettler({ ...tf.facilitator.context, store, publicClient: held.client }).runOnce();
      await held.reached;
      await running.start();
      let rows: { ref: string; status: string }[] = [];
      for (let i = 0; i < 300; i++) {
        rows = await recordsOf(store);
        if (rows.every((r) => r.status === "settled")) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(rows).toEqual(refs.map((ref) => ({ ref, status: "settled" })));
      expect(await balanceOf(account.address)).toBe(before - 6000n);
      // The frozen one comes back: its batch was released, so it queues nothing.
      held.open();
      await stuck;
      expect(await deductionsOnChain(refs)).toEqual([1, 1]);
      expect(await balanceOf(account.address)).toBe(before - 6000n);
    } finally {
      held.open();
      await stuck?.catch(() => undefined);
      await running.stop();
      await store.close();
    }
  });
});

describe("a usage ref sent again after its record was lost", () => {
  it("is not deducted again by the contract, and its record says settled with the first transaction", {
    timeout: 120_000,
  }, async () => {
    const { account, subscriptionId } = await subscriber(1_000_000n);
    // Two stores: the second stands for a facilitator whose record of the first sending is gone (a
    // process that died between broadcast and record on a store restored from before, say).
    const first = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const second = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    try {
      const scope = {
        chainId: tf.facilitator.context.chainId,
        manager: devnet.contracts.subscriptionManager,
      };
      const refs = ["again-0", "again-1", "again-2"];
      const before = await balanceOf(account.address);
      for (const store of [first, second]) {
        await recordUsage(
          store,
          scope,
          provider.address,
          refs.map((ref) => ({ subscriptionId, amount: "4000", ref })),
        );
      }
      await createUsageSettler({ ...tf.facilitator.context, store: first }).runOnce();
      const again = await createUsageSettler({ ...tf.facilitator.context, store: second }).runOnce();
      expect(again.settled).toBe(refs.length);

      expect(await deductionsOnChain(refs)).toEqual(refs.map(() => 1));
      expect(await balanceOf(account.address)).toBe(before - 4000n * BigInt(refs.length));
      const hashes = async (store: Store) =>
        store.query<{ ref: string; status: string; tx_hash: string }>(
          "SELECT ref, status, tx_hash FROM usage_records ORDER BY id",
        );
      const firstRows = await hashes(first);
      expect(firstRows.every((r) => r.status === "settled")).toBe(true);
      expect(await hashes(second)).toEqual(firstRows);
    } finally {
      await first.close();
      await second.close();
    }
  });
});

describe("two facilitator instances of one gas key over one store, many metered calls", () => {
  it("settle records whose sum is what the chain deducted, each ref once", { timeout: 240_000 }, async () => {
    const { subscriptionId } = await subscriber(10_000_000n);
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const instances = [
      await startTestFacilitator(devnet, { store }),
      await startTestFacilitator(devnet, { store }),
    ];
    try {
      const apiKey = await registerProvider(instances[0]!.url);
      const fromBlock = await devnet.publicClient.getBlockNumber();
      const refs: string[] = [];
      // Calls arriving a few at a time at either instance, as gates flushing their usage do.
      for (let round = 0; round < 30; round++) {
        await Promise.all(
          Array.from({ length: 4 }, async (_, i) => {
            const ref = `many-${round}-${i}`;
            refs.push(ref);
            const response = await fetch(`${instances[(round + i) % 2]!.url}/usage`, {
              method: "POST",
              headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
              body: JSON.stringify({ records: [{ subscriptionId, amount: "1000", ref }] }),
            });
            expect(response.status).toBe(202);
          }),
        );
        await new Promise((resolve) => setTimeout(resolve, 40));
      }
      let rows: { status: string; amount: string }[] = [];
      for (let i = 0; i < 600; i++) {
        rows = await store.query<{ status: string; amount: string }>(
          "SELECT status, amount::text AS amount FROM usage_records WHERE ref LIKE 'many-%'",
        );
        if (rows.length === refs.length && rows.every((r) => r.status === "settled" || r.status === "failed"))
          break;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect(rows.filter((r) => r.status === "settled")).toHaveLength(refs.length);
      const logs = await devnet.publicClient.getLogs({
        address: devnet.contracts.subscriptionManager,
        event: allowanceDeducted,
        args: { subscriptionId: BigInt(subscriptionId) },
        fromBlock,
      });
      const onChain = logs.reduce((sum, l) => sum + (l.args.amount ?? 0n), 0n);
      const recorded = rows.reduce((sum, r) => sum + BigInt(r.amount), 0n);
      expect(onChain).toBe(recorded);
      expect(new Set(logs.map((l) => l.args.ref)).size).toBe(logs.length);
    } finally {
      for (const instance of instances) await instance.stop();
      await store.close();
    }
  });
});

const allowanceDeducted = getAbiItem({ abi: subscriptionManagerAbi, name: "AllowanceDeducted" });

async function registerProvider(url: string): Promise<string> {
  const post = (path: string, body: unknown) =>
    fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const challenge = ProviderChallengeResponseSchema.parse(
    await (await post("/providers/challenge", { address: provider.address })).json(),
  );
  const signature = await provider.account.signMessage({ message: challenge.challenge });
  const response = await post("/providers", {
    address: provider.address,
    challenge: challenge.challenge,
    signature,
  });
  return ProviderRegisterResponseSchema.parse(await response.json()).apiKey;
}
