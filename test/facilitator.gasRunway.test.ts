/**
 * The gas key's runway: its balance over what its mined transactions cost lately, read from the fees
 * the outbox records with each outcome (tx_outbox.fee_paid). The figures match the chain (receipts and
 * the balance), the warning is logged once per episode, `/healthz` gives the figures to a metrics
 * reader only, `tollgate facilitator status` prints them, and an idle facilitator reads nothing.
 */
import { createPublicClient, type Hash, http } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRpcCounter } from "../bench/support/rpcCounter.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { facilitatorStatus } from "../src/cli/facilitatorStatus.ts";
import {
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { capturingLogger } from "../src/store/capturingLogger.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";

const rpc = createRpcCounter();
const captured = capturingLogger();
let devnet: Devnet;
let store: Store;
let facilitator: Facilitator;
let server: RunningServer;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  facilitator = createFacilitator({
    store,
    // The chain client's calls are counted: the runway must cost nothing at rest.
    publicClient: createPublicClient({
      chain: devnet.chain,
      transport: http(devnet.rpcUrl, { fetchFn: rpc.fetchFn }),
      pollingInterval: 50,
    }),
    network: devnet.network,
    gasAccount: devnet.accounts[3]!.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    builtinModules: false,
    logger: captured.logger,
    // A threshold no devnet key's runway reaches, so the first spend starts a warning episode; figures
    // read again after each outcome.
    gasRunway: { warnBelowSeconds: 1e15, refreshMs: 0 },
  });
  await facilitator.start();
  server = await serveApp(facilitator.app);
}, 60_000);

afterAll(async () => {
  await server?.close();
  await facilitator?.stop();
  await store?.close();
  await devnet?.stop();
});

const gasKey = () => devnet.accounts[3]!.address;

async function pay(): Promise<void> {
  const signedPayment = await signTestPayment(devnet, devnet.accounts[1]!, {
    payTo: devnet.accounts[2]!.address,
    amount: 10_000n,
  });
  const response = await fetch(`${server.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
  expect(response.status, await response.clone().text()).toBe(200);
}

async function metric(name: string): Promise<string | undefined> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return text
    .split("\n")
    .find((l) => l.startsWith(`${name} `))
    ?.split(" ")[1];
}

/** What the key's mined outbox transactions cost, from their receipts on chain. */
async function spentOnChain(): Promise<bigint> {
  const rows = await store.query<{ tx_hash: Hash; fee_paid: string }>(
    "SELECT tx_hash, fee_paid FROM tx_outbox WHERE status IN ('confirmed', 'reverted')",
  );
  let total = 0n;
  for (const row of rows) {
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: row.tx_hash });
    const cost = receipt.gasUsed * receipt.effectiveGasPrice;
    expect(BigInt(row.fee_paid)).toBe(cost);
    total += cost;
  }
  return total;
}

describe("the gas key's runway", () => {
  it("reads the balance at start and nothing at rest; with nothing spent the runway is unbounded", async () => {
    const balance = await devnet.publicClient.getBalance({ address: gasKey() });
    expect(await metric("tollgate_gas_key_balance_wei")).toBe(String(Number(balance)));
    expect(await metric("tollgate_gas_key_runway_seconds")).toBe("+Inf");
    rpc.reset();
    await sleep(3_000);
    expect(rpc.byMethod(), "RPC calls at rest").toEqual([]);
    const health = (await (await fetch(`${server.url}/healthz`)).json()) as {
      checks: Record<string, { ok: boolean; details?: Record<string, unknown> }>;
    };
    expect(health.checks.gas).toMatchObject({ ok: true, details: { runwaySeconds: null } });
  });

  it("divides the balance by the recent spend read from the outcomes' receipts, and warns once per episode", async () => {
    await pay();
    for (let i = 0; i < 100 && !(await metric("tollgate_gas_key_runway_seconds"))?.match(/^\d/); i++) {
      await sleep(50);
    }
    const spent = await spentOnChain();
    expect(spent > 0n).toBe(true);
    const balance = await devnet.publicClient.getBalance({ address: gasKey() });
    // The pace is measured over at least an hour: a first spend just now is not spread over a day.
    const expected = Number((balance * 3_600_000n) / spent) / 1_000;
    const seconds = Number(await metric("tollgate_gas_key_runway_seconds"));
    expect(seconds).toBeCloseTo(expected, 0);
    expect(await metric("tollgate_gas_key_balance_wei")).toBe(String(Number(balance)));

    const warnings = () => captured.lines().filter((l) => l.event === "gas.low");
    expect(warnings()).toHaveLength(1);
    expect(warnings()[0]).toMatchObject({ level: 40, balance: balance.toString(), spent: spent.toString() });

    // Another payment: the figures follow, the episode goes on without another warning.
    await pay();
    const spentAgain = await spentOnChain();
    for (let i = 0; i < 100; i++) {
      const state = (await (await fetch(`${server.url}/healthz`)).json()) as {
        checks: { gas: { details?: { spentWei?: string } } };
      };
      if (state.checks.gas.details?.spentWei === spentAgain.toString()) break;
      await sleep(50);
    }
    expect(warnings()).toHaveLength(1);

    // A metrics reader (here: a loopback peer, no token configured) gets the figures in /healthz ...
    const health = (await (await fetch(`${server.url}/healthz`)).json()) as {
      status: string;
      checks: Record<string, { ok: boolean; message?: string; details?: Record<string, unknown> }>;
    };
    expect(health.status).toBe("degraded");
    const after = await devnet.publicClient.getBalance({ address: gasKey() });
    expect(health.checks.gas).toMatchObject({
      ok: false,
      details: { balanceWei: after.toString(), spentWei: spentAgain.toString() },
    });
    // ... a stranger learns only that the key runs short, not its balance or spend.
    const stranger = (await (await facilitator.app.request("/healthz")).json()) as typeof health;
    expect(stranger.checks.gas?.ok).toBe(false);
    expect(stranger.checks.gas?.details).toBeUndefined();
    expect(JSON.stringify(stranger)).not.toContain(after.toString());

    // `tollgate facilitator status` prints the runway for the operator.
    const status = await facilitatorStatus({ url: server.url, fetch });
    expect(status.ok).toBe(false);
    expect(status.text).toMatch(/gas\s+NOT OK: the gas key runs dry .*: balance [\d.]+ ETH, runway \d+ d/);
    expect(status.text).toMatch(/fees\s+ok/);
  }, 60_000);

  it("status reports an unreachable facilitator and hides figures from a caller without access", async () => {
    const down = await facilitatorStatus({ url: "http://127.0.0.1:9", fetch });
    expect(down).toMatchObject({ ok: false });
    expect(down.text).toMatch(/unreachable/);
    // Through app.request there is no socket peer: the caller counts as remote, as a stranger would.
    const remote = await facilitatorStatus({
      url: "http://facilitator.test",
      fetch: (input, init) => Promise.resolve(facilitator.app.request(String(input), init)),
    });
    expect(remote.text).toMatch(/gas\s+NOT OK/);
    expect(remote.text).toMatch(/figures are shown to a metrics reader/);
    expect(remote.text).not.toMatch(/ETH/);
  });
});
