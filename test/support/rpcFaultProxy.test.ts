import { createPublicClient, createTestClient, createWalletClient, http, parseEther, webSocket } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Anvil, startAnvil } from "../../src/chain/startAnvil.ts";
import { type RpcFaultProxy, startRpcFaultProxy } from "./rpcFaultProxy.ts";

describe("rpcFaultProxy", () => {
  let anvil: Anvil;
  let proxy: RpcFaultProxy;

  beforeAll(async () => {
    anvil = await startAnvil({ accounts: 2 });
    proxy = await startRpcFaultProxy(anvil.rpcUrl, {}, { webSocket: "pipe" });
  });
  afterAll(async () => {
    await proxy?.close();
    await anvil?.stop();
  });

  const direct = () => createPublicClient({ transport: http(anvil.rpcUrl) });
  const proxied = () => createPublicClient({ transport: http(proxy.url, { retryCount: 0 }) });

  it("serves a node stuck at a stale head: blocks, receipts, logs and state above it do not exist yet", async () => {
    const node = createTestClient({ mode: "anvil", transport: http(anvil.rpcUrl) });
    const [from, to] = await createWalletClient({ transport: http(anvil.rpcUrl) }).getAddresses();
    const wallet = createWalletClient({ account: from!, transport: http(anvil.rpcUrl) });
    await node.mine({ blocks: 1 });
    const head = await direct().getBlockNumber();
    const balanceAtHead = await direct().getBalance({ address: to! });
    proxy.set({ staleHead: head });
    const hash = await wallet.sendTransaction({ to: to!, value: parseEther("1"), chain: null });
    const receipt = await direct().waitForTransactionReceipt({ hash });
    expect(receipt.blockNumber).toBe(head + 1n);

    const stale = proxied();
    expect(await stale.getBlockNumber({ cacheTime: 0 })).toBe(head);
    expect((await stale.getBlock()).number).toBe(head);
    await expect(stale.getBlock({ blockNumber: head + 1n })).rejects.toThrow(/could not be found/);
    await expect(stale.getBlock({ blockHash: receipt.blockHash })).rejects.toThrow(/could not be found/);
    await expect(stale.getTransactionReceipt({ hash })).rejects.toThrow(/could not be found/);
    expect((await stale.getTransaction({ hash })).blockNumber).toBeNull();
    expect(await stale.getBalance({ address: to! })).toBe(balanceAtHead);
    expect(await stale.getTransactionCount({ address: from! })).toBe(
      await direct().getTransactionCount({ address: from!, blockNumber: head }),
    );
    expect(await stale.getLogs({ fromBlock: head + 1n, toBlock: "latest" })).toEqual([]);

    // Caught up: the same calls see the block.
    proxy.set({});
    expect((await stale.getTransactionReceipt({ hash })).blockHash).toBe(receipt.blockHash);
    expect(await stale.getBalance({ address: to! })).toBe(balanceAtHead + parseEther("1"));
  });

  it("answers a JSON-RPC batch passed on whole when no fault rewrites calls", async () => {
    proxy.set({});
    const before = proxy.calls.get("eth_chainId") ?? 0;
    const response = await fetch(proxy.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify([
        { jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] },
        { jsonrpc: "2.0", id: 2, method: "eth_blockNumber", params: [] },
      ]),
    });
    const answers = (await response.json()) as { id: number; result: string }[];
    expect(answers.map((a) => a.id).sort()).toEqual([1, 2]);
    expect(answers.every((a) => a.result.startsWith("0x"))).toBe(true);
    expect(proxy.calls.get("eth_chainId")).toBe(before + 1);
  });

  it("pipes a WebSocket to the node, as anvil serves one on its HTTP port", async () => {
    proxy.set({ rateLimitEvery: 1 });
    const ws = createPublicClient({
      transport: webSocket(proxy.url.replace(/^http/, "ws"), { retryCount: 0 }),
    });
    try {
      expect(await ws.getBlockNumber({ cacheTime: 0 })).toBe(await direct().getBlockNumber());
      expect(await ws.getChainId()).toBe(await direct().getChainId());
    } finally {
      proxy.set({});
      await (await ws.transport.getRpcClient()).close();
    }
  });
});
