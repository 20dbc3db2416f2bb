/**
 * The facilitator at rest (docs/facilitator.md, "At rest"): with nothing to do it makes (next to) no
 * RPC calls, and work that arrives wakes the worker that serves it through a notification, not at its
 * next backstop read (30 s). A notification that is lost (the row written with triggers off) is still
 * served, by the backstop read.
 *
 * No timing is asserted beyond generous bounds: RPC calls are counted, and "promptly" means well before
 * the backstop read could have found the work.
 */
import pino from "pino";
import { createPublicClient } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRpcCounter } from "../bench/support/rpcCounter.ts";
import { rpcTransport } from "../src/chain/rpcTransport.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import {
  type CreateFacilitatorOptions,
  createFacilitator,
  serveApp,
} from "../src/facilitator/createFacilitator.ts";
import { insertPayment } from "../src/facilitator/paymentRecords.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";

const rpc = createRpcCounter();
let devnet: Devnet;
let store: Store;
let running: { url: string; stop(): Promise<void> };

/** A facilitator over the shared store whose chain client counts its RPC calls. */
async function start(settlement: CreateFacilitatorOptions["settlement"] = {}) {
  // The client createFacilitator builds from RPC URLs on a devnet, with its calls counted: two URLs of
  // the node, heads compared at every head read, so a failover probe at rest would show.
  const publicClient = createPublicClient({
    chain: devnet.chain,
    transport: rpcTransport([devnet.rpcUrl, `${devnet.rpcUrl}/`], {
      fetchFn: rpc.fetchFn,
      headCheckMs: 0,
    }),
    pollingInterval: 50,
  });
  const facilitator = createFacilitator({
    store,
    publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[3]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    channels: devnet.contracts.channels,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    logger: pino({ level: "silent" }),
    // Every other setting is a `tollgate facilitator`'s default.
    settlement,
  });
  await facilitator.start();
  const server = await serveApp(facilitator.app);
  return {
    url: server.url,
    async stop() {
      await server.close();
      await facilitator.stop();
    },
  };
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  running = await start();
}, 60_000);

afterAll(async () => {
  await running?.stop();
  if (store?.kind === "postgres" && store.schema !== undefined) await store.dropSchema();
  await store?.close();
  await devnet?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function pay(): Promise<Response> {
  const [payer, payTo] = [devnet.accounts[1]!, devnet.accounts[2]!];
  const signedPayment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 10_000n });
  return fetch(`${running.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
}

describe("a facilitator at rest", () => {
  it("makes no RPC calls over a quiet window on an automining devnet", async () => {
    // Start-up reads (the index's first pass, the channel worker's first look) are not rest.
    await sleep(2_000);
    rpc.reset();
    await sleep(6_000);
    // Before: the subscription indexer alone polled eth_blockNumber and eth_getBlockByNumber every
    // second, and the channel worker read the chain every 5 s (≈ 14 calls in this window).
    expect(rpc.byMethod(), "RPC calls at rest").toEqual([]);
  }, 30_000);

  it("wakes at once for a payment: it is settled long before the 30 s backstop read", async () => {
    const started = Date.now();
    const response = await pay();
    expect(response.status, await response.clone().text()).toBe(200);
    expect(Date.now() - started).toBeLessThan(15_000);
  }, 60_000);

  it("settles a payment whose notification was lost, on its backstop read", async () => {
    // A facilitator whose backstop comes soon, so the test need not wait 30 s.
    await running.stop();
    running = await start({ idlePollMs: 1_000 });
    const signed = await signTestPayment(devnet, devnet.accounts[1]!, {
      payTo: devnet.accounts[2]!.address,
      amount: 10_000n,
    });
    const a = signed.authorization;
    // Written with the store's triggers off: no `payments` notification is sent.
    await store.transaction(async (tx) => {
      await tx.query("SET LOCAL session_replication_role = replica");
      await insertPayment(tx, {
        nonce: a.nonce,
        network: devnet.network,
        token: signed.token,
        payer: a.from,
        payTo: a.to,
        amount: BigInt(a.value),
        memo: signed.memo,
        source: "tollgate",
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
        signature: signed.signature,
      });
    });
    let status = "pending";
    for (let i = 0; i < 300 && status !== "settled"; i++) {
      await sleep(100);
      const rows = await store.query<{ status: string }>("SELECT status FROM payments WHERE nonce = $1", [
        a.nonce.toLowerCase(),
      ]);
      status = rows[0]?.status ?? "missing";
    }
    expect(status).toBe("settled");
  }, 60_000);
});

describe("work notifications of the store", () => {
  it("are heard once per committed transaction, never for one rolled back", async () => {
    // A store of its own: the facilitator running on the file's store may write an event of its own
    // meanwhile (it was heard as a second notification in a full run).
    const quiet = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    let heard = 0;
    const stop = await quiet.listen("events", () => heard++);
    try {
      await quiet.transaction(async (tx) => {
        await tx.query("INSERT INTO events (type, data) VALUES ('test.one', '{}')");
        await tx.query("INSERT INTO events (type, data) VALUES ('test.two', '{}')");
      });
      for (let i = 0; i < 50 && heard === 0; i++) await sleep(50);
      expect(heard).toBe(1);
      await quiet
        .transaction(async (tx) => {
          await tx.query("INSERT INTO events (type, data) VALUES ('test.three', '{}')");
          throw new Error("roll back");
        })
        .catch(() => undefined);
      await sleep(300);
      expect(heard).toBe(1);
    } finally {
      await stop();
      if (quiet.kind === "postgres" && quiet.schema !== undefined) await quiet.dropSchema();
      await quiet.close();
    }
  });

  it.runIf(process.env.DATABASE_URL !== undefined && process.env.DATABASE_URL !== "")(
    "reach another instance sharing the PostgreSQL database, and no other schema",
    async () => {
      const { createPostgresStore } = await import("../src/store/createPostgresStore.ts");
      const other = await createPostgresStore({
        databaseUrl: process.env.DATABASE_URL!,
        schema: store.schema,
      });
      const elsewhere = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
      let heard = 0;
      let heardElsewhere = 0;
      const stop = await other.listen("payments", () => heard++);
      const stopElsewhere = await elsewhere.listen("payments", () => heardElsewhere++);
      try {
        await store.query("SELECT pg_notify($1, '')", [`tollgate_${store.schema}_payments`]);
        for (let i = 0; i < 100 && heard === 0; i++) await sleep(50);
        expect(heard).toBe(1);
        expect(heardElsewhere).toBe(0);
      } finally {
        await stop();
        await stopElsewhere();
        await other.close();
        await elsewhere.dropSchema();
        await elsewhere.close();
      }
    },
  );
});
