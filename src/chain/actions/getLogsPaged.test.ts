import { createPublicClient, erc20Abi, getAbiItem, http } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RpcFaultProxy, startRpcFaultProxy } from "../../../test/support/rpcFaultProxy.ts";
import { type Devnet, startDevnet } from "../startDevnet.ts";
import { getLogsPaged, isLogRangeRefusal } from "./getLogsPaged.ts";

const transfer = getAbiItem({ abi: erc20Abi, name: "Transfer" });

describe("getLogsPaged", () => {
  let devnet: Devnet;
  let proxy: RpcFaultProxy;
  let client: ReturnType<typeof createPublicClient>;
  let head: bigint;

  beforeAll(async () => {
    devnet = await startDevnet();
    // Mints spread over ~900 blocks: more than a capped provider answers in one query.
    for (const account of devnet.accounts.slice(1, 4)) {
      await devnet.mine(300);
      await devnet.fund(account.address, { usd: 1_000_000n });
    }
    head = await devnet.publicClient.getBlockNumber();
    proxy = await startRpcFaultProxy(devnet.rpcUrl);
    client = createPublicClient({ chain: devnet.chain, transport: http(proxy.url, { retryCount: 0 }) });
  });

  afterAll(async () => {
    await proxy?.close();
    await devnet?.stop();
  });

  const filter = () => ({ address: devnet.contracts.usd, event: transfer, fromBlock: 0n }) as const;

  it("reads every log of a range wider than the provider's cap, in pages it accepts", async () => {
    proxy.set({ maxLogsRange: 100 });
    const all = await devnet.publicClient.getLogs({ ...filter(), toBlock: head });
    expect(all.length).toBeGreaterThanOrEqual(3);
    await expect(client.getLogs({ ...filter(), toBlock: head })).rejects.toSatisfy(isLogRangeRefusal);

    const paged = await getLogsPaged(client, { ...filter(), toBlock: head, maxRange: 2_000 });
    expect(paged.map((l) => `${l.blockNumber}:${l.logIndex}`)).toEqual(
      all.map((l) => `${l.blockNumber}:${l.logIndex}`),
    );
    expect(paged.at(-1)?.args.to).toBe(devnet.accounts[3]?.address);
  });

  it("narrows the range when the provider refuses it with HTTP 413", async () => {
    proxy.set({ maxLogsRange: 250, refusal: "http-413" });
    const paged = await getLogsPaged(client, { ...filter(), toBlock: head });
    const all = await devnet.publicClient.getLogs({ ...filter(), toBlock: head });
    expect(paged).toHaveLength(all.length);
  });

  it("reads up to the head when no last block is given", async () => {
    proxy.set({ maxLogsRange: 500 });
    await devnet.fund(devnet.accounts[4]!.address, { usd: 1n });
    const paged = await getLogsPaged(client, filter());
    expect(paged.at(-1)?.args.to).toBe(devnet.accounts[4]?.address);
  });

  it("newest-first stops at the newest page with logs instead of reading all of history", async () => {
    proxy.set({ maxLogsRange: 100 });
    const before = proxy.calls.get("eth_getLogs") ?? 0;
    const found = await getLogsPaged(client, {
      ...filter(),
      args: { to: devnet.accounts[3]!.address },
      toBlock: head,
      maxRange: 100,
      order: "newest-first",
    });
    expect(found).toHaveLength(1);
    expect(found[0]?.args.to).toBe(devnet.accounts[3]?.address);
    expect((proxy.calls.get("eth_getLogs") ?? 0) - before).toBeLessThan(3);
  });

  it.each([
    ["a 503", { unavailable: true }],
    ["a 429", { rateLimitEvery: 1 }],
  ])("passes on %s instead of narrowing the range", async (_, faults) => {
    proxy.set(faults);
    const before = proxy.calls.get("eth_getLogs") ?? 0;
    await expect(getLogsPaged(client, { ...filter(), toBlock: head })).rejects.toThrow(/HTTP request failed/);
    proxy.set({});
    expect(proxy.calls.get("eth_getLogs") ?? 0).toBe(before + 1);
  });
});
