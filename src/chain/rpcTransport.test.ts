/**
 * rpcTransport against anvil behind rpcFaultProxy: which provider a call reaches, what is retried and
 * after how long, and what an error leaving it says.
 */
import { createPublicClient } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RpcFaultProxy, startRpcFaultProxy } from "../../test/support/rpcFaultProxy.ts";
import { devnetChain } from "./networks.ts";
import { type RpcProviderEvent, rpcTransport } from "./rpcTransport.ts";
import { type Anvil, startAnvil } from "./startAnvil.ts";

const KEY = "Zx81kQ2mP9vLr5TtYw3sNc7dHf0aJbEu";
let anvil: Anvil;
let a: RpcFaultProxy;
let b: RpcFaultProxy;

beforeAll(async () => {
  anvil = await startAnvil({ accounts: 1 });
  a = await startRpcFaultProxy(anvil.rpcUrl);
  b = await startRpcFaultProxy(anvil.rpcUrl);
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await anvil?.stop();
});

function clientOver(urls: string[], options: Parameters<typeof rpcTransport>[1] = {}) {
  const events: RpcProviderEvent[] = [];
  const client = createPublicClient({
    chain: devnetChain,
    transport: rpcTransport(urls, { backoffBaseMs: 5, ...options, onEvent: (e) => events.push(e) }),
  });
  return { client, events };
}

const count = (p: RpcFaultProxy, method: string) => p.calls.get(method) ?? 0;

describe("rpcTransport", () => {
  it("passes a node's own answer on from the first provider, neither retried nor sent to the next", async () => {
    a.set({});
    const { client } = clientOver([`${a.url}/v2/${KEY}`, b.url]);
    const before = { a: count(a, "eth_sendRawTransaction"), b: count(b, "eth_sendRawTransaction") };
    await expect(client.request({ method: "eth_sendRawTransaction", params: ["0x01"] })).rejects.toThrow();
    expect(count(a, "eth_sendRawTransaction")).toBe(before.a + 1);
    expect(count(b, "eth_sendRawTransaction")).toBe(before.b);
  });

  it("waits what a 429's Retry-After asks, within its bound, and says which provider failed by its redacted URL", async () => {
    const { client, events } = clientOver([`${a.url}/v2/${KEY}`], { backoffMaxMs: 1_500 });
    a.set({ rateLimitEvery: 1, retryAfter: "1" });
    const answer = client.getBlockNumber({ cacheTime: 0 });
    await expect.poll(() => events.some((e) => e.kind === "retry"), { timeout: 5_000 }).toBe(true);
    a.set({});
    expect(await answer).toBeGreaterThanOrEqual(0n);
    const retry = events.find((e) => e.kind === "retry");
    expect(retry?.kind === "retry" && retry.delayMs).toBeGreaterThanOrEqual(1_000);
    expect(retry?.kind === "retry" && retry.delayMs).toBeLessThanOrEqual(1_500);
    expect(events.find((e) => e.kind === "down")).toMatchObject({ provider: `${a.url}/v2/***` });
  });

  it("gives up after its retries with the provider's error, its URL redacted", async () => {
    const { client, events } = clientOver([`${a.url}/v2/${KEY}`], { retryCount: 2 });
    a.set({ unavailable: true });
    try {
      const error = await client.getBlockNumber({ cacheTime: 0 }).then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(error).toBeDefined();
      expect(`${error!.message}\n${error!.stack}\n${JSON.stringify(error)}`).not.toContain(KEY);
      expect(error!.message).toContain(`${a.url}/v2/***`);
      expect(events.filter((e) => e.kind === "retry")).toHaveLength(2);
    } finally {
      a.set({});
    }
  });

  it("counts a head that stands still for several block times as stalled, and as caught up once it moves", async () => {
    let t = 0;
    const events: RpcProviderEvent[] = [];
    const client = createPublicClient({
      chain: { ...devnetChain, blockTime: 1_000 },
      transport: rpcTransport([b.url], { now: () => t, stallBlocks: 5, onEvent: (e) => events.push(e) }),
    });
    await client.getBlockNumber({ cacheTime: 0 });
    t = 4_000;
    await client.getBlockNumber({ cacheTime: 0 });
    expect(events.filter((e) => e.kind === "stalled")).toEqual([]);
    t = 6_000;
    const head = await client.getBlockNumber({ cacheTime: 0 });
    expect(events.filter((e) => e.kind === "stalled")).toMatchObject([
      { provider: b.url, head, sinceMs: 6_000 },
    ]);
    await client.request({ method: "evm_mine" } as never);
    t = 7_000;
    await client.getBlockNumber({ cacheTime: 0 });
    expect(events.filter((e) => e.kind === "caught-up")).toMatchObject([
      { provider: b.url, head: head + 1n },
    ]);
  });
});
