/**
 * The cap of a metered plan holds exactly across gate processes sharing a leased usage ledger
 * (docs/gate.md, "Metering across instances"): three gate processes (test/fixtures/meteredGateProcess.ts)
 * lease allowance from one PostgreSQL or one Redis, under 200 concurrent requests and after one of them
 * is SIGKILLed holding a lease; a real facilitator settles the charges on a real devnet. Served units =
 * min(demand, cap), and what moves on chain is exactly the overage of the served units.
 *
 * Needs DATABASE_URL (PostgreSQL) and REDIS_URL (Redis): PGlite cannot be shared between processes.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { UsageSummarySchema } from "../src/protocol/subscriptions.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { registerTestProvider } from "./support/channelFixtures.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const DATABASE_URL = process.env.DATABASE_URL;
const REDIS_URL = process.env.REDIS_URL;
const fixture = new URL("./fixtures/meteredGateProcess.ts", import.meta.url).pathname;
const ORIGIN = "https://metered.api.test";
const INCLUDED = 20;
const UNIT = 1_000n;
/** 0.15 USDC of overage at 0.001 a unit: 150 units past the 20 included, a cap of 170 a cycle. */
const MAX_OVERAGE = "0.15";
const CAP = 170;
const LEASE_TTL_MS = 3_000;

if (DATABASE_URL === undefined || REDIS_URL === undefined) {
  console.warn(
    "metering.sharedLedger: skipped — set DATABASE_URL (PostgreSQL) and REDIS_URL (Redis); .ci/run sets both",
  );
}

type GateProcess = { url: string; child: ChildProcess };

function startGate(config: Record<string, unknown>): Promise<GateProcess> {
  // `--import tsx` in this very process, so that a SIGKILL reaches the gate itself.
  const child = spawn(process.execPath, ["--import", "tsx", fixture, JSON.stringify(config)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let buffer = "";
    child.stdout!.on("data", (chunk: Buffer) => {
      buffer += chunk.toString("utf8");
      const line = buffer.split("\n").find((l) => l.startsWith("listening "));
      if (line !== undefined) resolve({ url: line.slice("listening ".length), child });
    });
    child.once("exit", (code) => reject(new Error(`gate exited (${code}) before listening`)));
  });
}

async function kill(gate: GateProcess): Promise<void> {
  if (gate.child.exitCode !== null || gate.child.signalCode !== null) return;
  const exited = new Promise((resolve) => gate.child.once("exit", resolve));
  gate.child.kill("SIGKILL");
  await exited;
}

function sharedLedgerSuite(kind: "postgres" | "redis") {
  let devnet: Devnet;
  let tf: TestFacilitator;
  let provider: DevnetAccount;
  let apiKey: string;
  let planId: bigint;
  let store: Store | undefined;
  const gates: GateProcess[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    tf = await startTestFacilitator(devnet);
    provider = devnet.accounts[1]!;
    apiKey = await registerTestProvider(tf.url, provider);
    const wallet = devnet.walletClient(provider);
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await setOperator(wallet, {
        manager: devnet.contracts.subscriptionManager,
        operator: tf.facilitator.context.gas.address,
        allowed: true,
      }),
    });
    const hash = await createPlan(wallet, {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: 1_000_000n,
      interval: 30n * 86_400n,
      includedUnits: BigInt(INCLUDED),
      overageUnitPrice: UNIT,
    });
    planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
    const name = `shared-${randomBytes(4).toString("hex")}`;
    let ledger: Record<string, unknown>;
    if (kind === "postgres") {
      store = await createTestStore({ databaseUrl: DATABASE_URL });
      ledger = { kind, databaseUrl: DATABASE_URL, schema: store.schema, name };
    } else {
      ledger = { kind, url: REDIS_URL, name };
    }
    const config = {
      payTo: provider.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: tf.url,
      apiKey,
      planId: planId.toString(),
      publicOrigin: ORIGIN,
      ledger,
      leaseTtlMs: LEASE_TTL_MS,
    };
    gates.push(...(await Promise.all([startGate(config), startGate(config), startGate(config)])));
  }, 180_000);

  afterAll(async () => {
    for (const gate of gates) await kill(gate);
    await store?.close();
    await tf?.stop();
    await devnet?.stop();
  });

  async function subscriber() {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 20_000_000n });
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url, fetch });
    const subscriptionId = await payer.subscribe({ planId, maxOverage: MAX_OVERAGE });
    return { subscriptionId, headers: await payer.subscriptionHeaders(subscriptionId, ORIGIN) };
  }

  /** One request, retried while answered 429 (room on another instance's lease); its final status. */
  async function use(gate: GateProcess, headers: Record<string, string>): Promise<number> {
    for (let attempt = 0; attempt < 400; attempt++) {
      const response = await fetch(`${gate.url}/api/item`, { headers });
      await response.arrayBuffer();
      if (response.status !== 429) return response.status;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error("still 429 after 400 attempts");
  }

  const balanceOf = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

  /** Waits until the facilitator has settled `expected` for the subscription on chain, with nothing open. */
  async function settled(subscriptionId: bigint, expected: bigint) {
    let last: unknown;
    for (let i = 0; i < 600; i++) {
      const response = await fetch(`${tf.url}/usage?subscriptionId=${subscriptionId}`, {
        headers: { authorization: `Bearer ${apiKey}` },
      });
      const summary = UsageSummarySchema.parse(await response.json());
      last = summary;
      if (summary.unsettled.count === 0 && BigInt(summary.settled.amount) >= expected) return summary;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`usage did not settle: ${JSON.stringify(last)}`);
  }

  it("serves exactly the cap to 200 concurrent requests over three processes and settles exactly its overage on chain", async () => {
    const { subscriptionId, headers } = await subscriber();
    const before = await balanceOf(provider.address);
    const statuses = await Promise.all(
      Array.from({ length: 200 }, (_, i) => use(gates[i % gates.length]!, headers)),
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(CAP);
    expect(statuses.filter((s) => s === 402)).toHaveLength(200 - CAP);
    const expected = BigInt(CAP - INCLUDED) * UNIT;
    const summary = await settled(subscriptionId, expected);
    expect(BigInt(summary.settled.amount)).toBe(expected);
    expect((await balanceOf(provider.address)) - before).toBe(expected);
  }, 240_000);

  it("serves exactly the cap when one process is SIGKILLed holding a lease: its served units are counted once, its unspent ones come back at expiry", async () => {
    const { subscriptionId, headers } = await subscriber();
    const before = await balanceOf(provider.address);
    const victim = gates[0]!;
    // Sequential uses on one process until it holds a lease partly spent (sizes adapt: 8, 16, 32…).
    let served = 0;
    for (;;) {
      expect(await use(victim, headers)).toBe(200);
      served++;
      const leases = (await (await fetch(`${victim.url}/leases`)).json()) as {
        units: string;
        spent: string;
      }[];
      if (served >= 10 && leases.some((l) => BigInt(l.spent) < BigInt(l.units))) break;
      if (served > 60) throw new Error("the process never held a partly spent lease");
    }
    await kill(victim);
    const survivors = gates.slice(1);
    const statuses = await Promise.all(
      Array.from({ length: 200 }, (_, i) => use(survivors[i % survivors.length]!, headers)),
    );
    const afterKill = statuses.filter((s) => s === 200).length;
    // Demand (served before the kill + 200) is above the cap: exactly the cap is served.
    expect(served + afterKill).toBe(CAP);
    expect(statuses.filter((s) => s === 402)).toHaveLength(200 - afterKill);
    const expected = BigInt(CAP - INCLUDED) * UNIT;
    const summary = await settled(subscriptionId, expected);
    expect(BigInt(summary.settled.amount)).toBe(expected);
    expect((await balanceOf(provider.address)) - before).toBe(expected);
  }, 240_000);
}

describe.runIf(DATABASE_URL && REDIS_URL)("three gate processes sharing a leased usage ledger", () => {
  describe("in PostgreSQL", () => sharedLedgerSuite("postgres"));
  describe("in Redis", () => sharedLedgerSuite("redis"));
});
