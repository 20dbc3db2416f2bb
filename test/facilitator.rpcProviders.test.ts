/**
 * The facilitator on RPC providers as they are: several URLs with failover (one answering 503 or
 * hanging), a 429 storm, a provider whose head lags; each through rpcFaultProxy in front of the devnet.
 * Payments settle exactly once (balances read from the chain), provider keys stay out of every log line
 * and metric, and the operator hears of a provider once when it fails or lags and once when it is back.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import type { CreateFacilitatorOptions } from "../src/facilitator/createFacilitator.ts";
import { capturingLogger } from "../src/store/capturingLogger.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { type RpcFaultProxy, startRpcFaultProxy } from "./support/rpcFaultProxy.ts";

const KEY_A = "Zx81kQ2mP9vLr5TtYw3sNc7dHf0aJbEu";
const KEY_B = "0123456789abcdef0123456789abcdef";

let devnet: Devnet;
let payTo: DevnetAccount;
const proxies: RpcFaultProxy[] = [];
const facilitators: TestFacilitator[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 8 });
  payTo = devnet.accounts[0]!;
});

// One facilitator at a time: they share the devnet's gas key.
afterEach(async () => {
  for (const f of facilitators.splice(0)) await f.stop();
});

afterAll(async () => {
  for (const p of proxies) await p.close();
  await devnet?.stop();
});

async function proxy(): Promise<RpcFaultProxy> {
  const p = await startRpcFaultProxy(devnet.rpcUrl);
  proxies.push(p);
  return p;
}

async function facilitator(
  rpcUrl: string,
  rpcFailover: CreateFacilitatorOptions["rpcFailover"],
  logger = capturingLogger().logger,
): Promise<TestFacilitator> {
  const f = await startTestFacilitator(devnet, { rpcUrl, rpcFailover, logger });
  facilitators.push(f);
  return f;
}

const balanceOf = (address: `0x${string}`) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: address });

/** Payments answered 200 (each must move its amount once). */
let settled = 0;

async function pay(f: TestFacilitator, payer: DevnetAccount, amount: bigint): Promise<number> {
  const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount });
  const response = await fetch(`${f.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment: payment }),
  });
  await response.arrayBuffer();
  if (response.status === 200 && payer === devnet.accounts[1]) settled++;
  return response.status;
}

const total = (p: RpcFaultProxy) => [...p.calls.values()].reduce((a, b) => a + b, 0);
const metricsOf = async (f: TestFacilitator) => (await fetch(`${f.url}/metrics`)).text();

describe("several RPC URLs", () => {
  it("settles each payment once through the next provider while the first answers 503 or hangs, and uses the first again once it is back", async () => {
    const a = await proxy();
    const b = await proxy();
    const { logger, lines } = capturingLogger();
    const f = await facilitator(
      `${a.url}/v2/${KEY_A}, ${b.url}/v3/${KEY_B}`,
      { cooldownMs: 300, timeout: 1_000, retryCount: 2, backoffBaseMs: 20 },
      logger,
    );
    const payer = devnet.accounts[1]!;
    const before = { payer: await balanceOf(payer.address), payTo: await balanceOf(payTo.address) };

    a.set({ unavailable: true });
    for (let i = 0; i < 3; i++) expect(await pay(f, payer, 10_000n)).toBe(200);
    expect(total(b)).toBeGreaterThan(0);
    const failingLine = "RPC provider failing; calls go to the next provider, this one is tried again later";
    const failing = lines().filter(
      (l) => l.msg === "RPC provider failing; calls go to the next provider, this one is tried again later",
    );
    expect(failing.map((l) => l.provider)).toEqual([`${a.url}/v2/***`]);

    // Back: after its cooldown the first provider is asked again, and answers.
    a.set({});
    const seen = total(a);
    await expect
      .poll(
        async () => {
          expect(await pay(f, payer, 10_000n)).toBe(200);
          return total(a);
        },
        { timeout: 10_000, interval: 100 },
      )
      .toBeGreaterThan(seen);
    await expect
      .poll(() => lines().some((l) => l.msg === "RPC provider answering again"), { timeout: 5_000 })
      .toBe(true);

    // A provider that hangs: its calls time out (1 s here) and go to the next.
    a.set({ hang: true });
    const timedOut = lines().filter((l) => l.msg === failingLine).length;
    expect(await pay(f, payer, 10_000n)).toBe(200);
    expect(lines().filter((l) => l.msg === failingLine).length).toBe(timedOut + 1);
    a.set({});

    // Exactly once each, on chain: every payment answered 200 moved its amount once.
    const paid = before.payer - (await balanceOf(payer.address));
    expect(paid).toBe(BigInt(settled) * 10_000n);
    expect(await balanceOf(payTo.address)).toBe(before.payTo + paid);

    // No key in any log line or metric; providers named by their redacted URL.
    const printed = JSON.stringify(lines()) + (await metricsOf(f));
    expect(printed).not.toContain(KEY_A);
    expect(printed).not.toContain(KEY_B);
    // Down after the hang, until it is next asked.
    expect(await metricsOf(f)).toContain(`tollgate_rpc_provider_up{provider="${a.url}/v2/***"} 0`);
  });
});

describe("every provider down", () => {
  it("answers 503 ChainUnavailable, and neither the answer, /healthz nor the log names a provider's key", async () => {
    const a = await proxy();
    const b = await proxy();
    const { logger, lines } = capturingLogger();
    const f = await facilitator(
      `${a.url}/v2/${KEY_A},${b.url}/v3/${KEY_B}`,
      { retryCount: 1, backoffBaseMs: 5 },
      logger,
    );
    a.set({ unavailable: true });
    b.set({ unavailable: true });
    try {
      const payment = await signTestPayment(devnet, devnet.accounts[7]!, {
        payTo: payTo.address,
        amount: 10_000n,
      });
      const response = await fetch(`${f.url}/authorize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ signedPayment: payment }),
      });
      expect(response.status).toBe(503);
      const health = await fetch(`${f.url}/healthz`);
      expect(health.status).toBe(503);
      const printed = `${await response.text()}${await health.text()}${JSON.stringify(lines())}${await metricsOf(f)}`;
      expect(printed).not.toContain(KEY_A);
      expect(printed).not.toContain(KEY_B);
      expect(lines().some((l) => l.provider === `${b.url}/v3/***`)).toBe(true);
    } finally {
      a.set({});
      b.set({});
    }
  });
});

describe("a 429 storm", () => {
  it("slows settlement down but loses and double-pays nothing", async () => {
    const c = await proxy();
    const { logger, lines } = capturingLogger();
    const f = await facilitator(
      `${c.url}/v2/${KEY_A}`,
      { retryCount: 8, backoffBaseMs: 10, backoffMaxMs: 200 },
      logger,
    );
    const payers = devnet.accounts.slice(2, 6);
    const before = await Promise.all(payers.map((p) => balanceOf(p.address)));
    const payToBefore = await balanceOf(payTo.address);
    const payments = await Promise.all(
      payers.flatMap((p) =>
        [7_000n, 3_000n].map((amount) => signTestPayment(devnet, p, { payTo: payTo.address, amount })),
      ),
    );
    const send = async (signedPayment: unknown) => {
      const response = await fetch(`${f.url}/authorize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ signedPayment }),
      });
      return { status: response.status, body: await response.text() };
    };
    c.set({ rateLimitEvery: 2, retryAfter: "0" });
    const during = await Promise.all(payments.map(send));
    c.set({});
    // Through the storm: settled, or (all retries spent) 503 ChainUnavailable, never a fault of ours.
    const errors = () => JSON.stringify(lines().filter((l) => Number(l.level) >= 50));
    for (const answer of during) expect([200, 503], `${answer.body} ${errors()}`).toContain(answer.status);
    expect(during.filter((a) => a.status === 200).length).toBeGreaterThan(0);
    expect(c.rateLimited()).toBeGreaterThan(0);
    // A payer sends a refused payment again, as the 503's Retry-After asks; every payment sent again
    // after the storm is answered 200, and each moved its amount once.
    const after = await Promise.all(payments.map(send));
    expect(after.map((a) => a.status)).toEqual(payments.map(() => 200));
    for (const [i, p] of payers.entries()) expect(await balanceOf(p.address)).toBe(before[i]! - 10_000n);
    expect(await balanceOf(payTo.address)).toBe(payToBefore + 40_000n);
    expect(await metricsOf(f)).toMatch(/tollgate_rpc_retries_total [1-9]/);
    expect(lines().filter((l) => Number(l.level) >= 50)).toEqual([]);
  });
});

describe("a lagging provider", () => {
  it("is detected against the other provider's head, logged once, and not read from until it catches up", async () => {
    const lag = await proxy();
    const fresh = await proxy();
    // Enough blocks for a lag to show.
    await devnet.publicClient.request({ method: "anvil_mine", params: ["0x20"] } as never);
    lag.set({ lagBlocks: 20 });
    const { logger, lines } = capturingLogger();
    const f = await facilitator(
      `${lag.url}/v2/${KEY_A},${fresh.url}`,
      { headCheckMs: 0, maxLagBlocks: 5 },
      logger,
    );
    const payer = devnet.accounts[6]!;
    const before = await balanceOf(payer.address);
    expect(await pay(f, payer, 10_000n)).toBe(200);
    await expect
      .poll(
        () =>
          lines().filter(
            (l) => l.msg === "RPC provider lags behind the others; not read from until it catches up",
          ).length,
        {
          timeout: 10_000,
        },
      )
      .toBe(1);
    expect(await metricsOf(f)).toContain(`tollgate_rpc_provider_lagging{provider="${lag.url}/v2/***"} 1`);

    // From now on only head comparisons reach the lagging provider.
    const calls = new Map(lag.calls);
    for (let i = 0; i < 2; i++) expect(await pay(f, payer, 10_000n)).toBe(200);
    for (const [method, n] of lag.calls) {
      if (method !== "eth_blockNumber") expect(n, method).toBe(calls.get(method) ?? 0);
    }
    expect(
      lines().filter(
        (l) => l.msg === "RPC provider lags behind the others; not read from until it catches up",
      ),
    ).toHaveLength(1);
    expect(await balanceOf(payer.address)).toBe(before - 30_000n);

    // Caught up: said once, and used again.
    lag.set({});
    await expect
      .poll(
        async () => {
          expect(await pay(f, payer, 10_000n)).toBe(200);
          return lines().some((l) => l.msg === "RPC provider caught up");
        },
        { timeout: 10_000, interval: 100 },
      )
      .toBe(true);
    expect(JSON.stringify(lines())).not.toContain(KEY_A);
  });
});
