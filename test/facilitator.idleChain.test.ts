/**
 * A devnet mines only when a transaction arrives, so after a quiet spell its latest block is minutes
 * older than the clock. A payment signed then (validAfter = now − 60 s) is valid in the block that will
 * carry it and must settle: the README's quick tour pays minutes after `tollgate devnet up`.
 */
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createFacilitator, type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import type { Clock } from "../src/protocol/clock.ts";
import { createStore } from "../src/store/createStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment, testMemo } from "./support/facilitatorHarness.ts";

const IDLE_SECONDS = 600;
/** The world ten minutes after the chain's last block. */
const later: Clock = { now: () => Date.now() + IDLE_SECONDS * 1000 };

let devnet: Devnet;
let store: Store;
let server: RunningServer;
let stopFacilitator: () => Promise<void>;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  store = await createStore({ dataDir: "memory://" });
  const facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: devnet.accounts[3]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
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
    clock: later,
  });
  await facilitator.start();
  stopFacilitator = () => facilitator.stop();
  server = await serveApp(facilitator.app);
});

afterAll(async () => {
  await server?.close();
  await stopFacilitator?.();
  await store?.close();
  await devnet?.stop();
});

describe("a payment on a chain that has been idle", () => {
  it("settles although the latest block is older than the authorization's validAfter", async () => {
    // The chain's clock moves on without a block, as an idle automining devnet's does.
    await devnet.testClient.increaseTime({ seconds: IDLE_SECONDS });
    const latest = await devnet.publicClient.getBlock({ blockTag: "latest" });
    const now = BigInt(Math.floor(later.now() / 1000));
    const [payer, payTo] = [devnet.accounts[1]!, devnet.accounts[2]!];
    // The gate that quoted this payment lives in the same world as the facilitator: its memo expires
    // five minutes after `later`, not after the wall clock.
    const memo = testMemo({
      payTo: payTo.address,
      amount: 250_000n,
      token: devnet.contracts.usd,
      expiresAt: Number(now) + 300,
    });
    const signedPayment = await signTestPayment(devnet, payer, {
      payTo: payTo.address,
      amount: 250_000n,
      memo,
      validAfter: now - 60n,
      validBefore: now + 600n,
    });
    expect(now - 60n).toBeGreaterThan(latest.timestamp);
    const balance = () =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: payTo.address });
    const before = await balance();

    const response = await fetch(`${server.url}/authorize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ signedPayment }),
    });

    expect(response.status, await response.clone().text()).toBe(200);
    expect((await balance()) - before).toBe(250_000n);
  }, 60_000);
});
