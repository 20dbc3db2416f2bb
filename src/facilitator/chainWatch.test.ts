/**
 * The chain watch on a devnet: a log of a watched address reaches its listener over anvil's WebSocket,
 * and releasing the watch closes the socket without reporting a failure (the facilitator logged two
 * warnings at every stop). A node that goes away and comes back costs one warning, and the watch
 * subscribes again on its own socket.
 */
import { inspect } from "node:util";
import { createPublicClient } from "viem";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startRpcFaultProxy } from "../../test/support/rpcFaultProxy.ts";
import { startTcpProxy } from "../../test/support/tcpProxy.ts";
import { rpcTransport } from "../chain/rpcTransport.ts";
import { type Anvil, startAnvil } from "../chain/startAnvil.ts";
import { connectDevnet, type Devnet, setUpDevnet, startDevnet } from "../chain/startDevnet.ts";
import { capturingLogger } from "../store/capturingLogger.ts";
import { acquireChainWatch } from "./chainWatch.ts";

let devnet: Devnet;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 2 });
});

afterAll(async () => {
  await devnet?.stop();
});

describe("acquireChainWatch", () => {
  it("tells a listener of its address's logs over WebSocket, and closes quietly when released", async () => {
    const { logger, lines } = capturingLogger();
    const { watch, release } = acquireChainWatch(devnet.publicClient, logger);
    expect(watch.mode()).toBe("websocket");
    let told = 0;
    watch.watch(devnet.contracts.usd, () => {
      told++;
    });
    const stopOther = watch.watch(devnet.contracts.batchSettler, () => {});
    // The subscription tells once when it begins; a transfer's log tells again.
    await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(0);
    const before = told;
    await devnet.fund(devnet.accounts[1]!.address, { usd: 1n });
    await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(before);
    // As a stopping facilitator does: one follower stops (the watch subscribes again for the rest),
    // and the watch is released while that subscription is on its way, its listener still on.
    stopOther();
    release();
    await new Promise((r) => setTimeout(r, 300));
    expect(
      lines()
        .filter((l) => Number(l.level) >= 40)
        .map((l) => l.msg),
    ).toEqual([]);
  });

  it("reports a node that went away once, and subscribes again on a new socket when it is back", async () => {
    // A node of its own, on a port it comes back on; the same deployer deploys the same addresses.
    let anvil: Anvil = await startAnvil({ accounts: 2 });
    const port = anvil.port;
    let node = await setUpDevnet(anvil.rpcUrl, 2, 10n ** 12n, () => anvil.stop());
    const printed: string[] = [];
    const console_ = vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
      printed.push(inspect(args));
    });
    const { logger, lines } = capturingLogger();
    const { watch, release } = acquireChainWatch(node.publicClient, logger, { resubscribeMs: 200 });
    try {
      let told = 0;
      watch.watch(node.contracts.usd, () => {
        told++;
      });
      await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(0);

      await anvil.stop();
      // Down for a dozen resubscription attempts.
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      anvil = await startAnvil({ accounts: 2, port });
      node = await setUpDevnet(anvil.rpcUrl, 2, 10n ** 12n, () => anvil.stop());
      await expect
        .poll(() => lines().some((line) => line.msg === "chain log subscription restored"), {
          timeout: 10_000,
        })
        .toBe(true);
      const before = told;
      await node.fund(node.accounts[1]!.address, { usd: 1n });
      await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(before);

      // One warning for the outage, its attempts at debug; nothing printed beside the log.
      const warnings = lines().filter((line) => Number(line.level) >= 40);
      expect(warnings.map((line) => line.msg)).toHaveLength(1);
      const attempts = lines().filter(
        (line) => Number(line.level) === 20 && String(line.msg).startsWith("cannot subscribe to chain logs"),
      );
      expect(attempts.length).toBeGreaterThan(3);
      expect(printed.filter((text) => text.includes(`:${port}`))).toEqual([]);
    } finally {
      release();
      console_.mockRestore();
      await anvil.stop();
    }
  });

  it("reads the head instead when the provider refuses WebSocket, asking for a socket once", async () => {
    // An HTTP-only provider in front of the devnet: the ws:// derived from its http:// URL is refused.
    const proxy = await startRpcFaultProxy(devnet.rpcUrl);
    const client = createPublicClient({
      chain: devnet.publicClient.chain,
      transport: rpcTransport([`${proxy.url}/v2/abcdefghijklmnopqrstuvwxyz012345`, devnet.rpcUrl]),
    });
    const { logger, lines } = capturingLogger();
    const { watch, release } = acquireChainWatch(client, logger, { resubscribeMs: 20, pollMs: 20 });
    try {
      expect(watch.mode()).toBe("websocket");
      let told = 0;
      watch.watch(devnet.contracts.usd, () => {
        told++;
      });
      await expect.poll(() => watch.mode(), { timeout: 10_000 }).toBe("blocks");
      await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(0);
      const before = told;
      await devnet.fund(devnet.accounts[1]!.address, { usd: 1n });
      await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(before);
      // Many polls later (every 20 ms, as the resubscription would have been), still one socket asked.
      const polls = proxy.calls.get("eth_blockNumber") ?? 0;
      await expect
        .poll(() => proxy.calls.get("eth_blockNumber") ?? 0, { timeout: 10_000 })
        .toBeGreaterThan(polls + 10);
      expect(proxy.webSocketAttempts()).toBe(1);
      const warnings = lines().filter((line) => Number(line.level) >= 40);
      expect(warnings.map((line) => line.msg)).toEqual([
        "the RPC provider refuses WebSocket; watching the chain by reading its head every 20 ms",
      ]);
      // The provider's key is not printed.
      expect(JSON.stringify(lines())).not.toContain("abcdefghijklmnopqrstuvwxyz012345");
    } finally {
      release();
      await proxy.close();
    }
  });

  it("gives up a socket whose connection was dropped under it, once, and subscribes again when the path is back", async () => {
    // The node stays up; the path to it is cut, which drops the open socket with a subscription on its
    // way. Closing a socket that has just failed makes it report its close to the watch again (each
    // request and subscription still on it): that must not start another close.
    const url = new URL(devnet.rpcUrl);
    const proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) });
    const client = connectDevnet(proxy.url, 2, async () => undefined).publicClient;
    const { logger, lines } = capturingLogger();
    const { watch, release } = acquireChainWatch(client, logger, { resubscribeMs: 200 });
    try {
      let told = 0;
      watch.watch(devnet.contracts.usd, () => {
        told++;
      });
      await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(0);
      // A second follower: the watch subscribes again for both, and the path is cut under that request.
      watch.watch(devnet.contracts.batchSettler, () => {});
      await new Promise((resolve) => setImmediate(resolve));
      await proxy.cut();
      await expect
        .poll(() => lines().filter((line) => Number(line.level) >= 40).length, { timeout: 10_000 })
        .toBe(1);
      await new Promise((resolve) => setTimeout(resolve, 600));
      await proxy.restore();
      await expect
        .poll(() => lines().some((line) => line.msg === "chain log subscription restored"), {
          timeout: 10_000,
        })
        .toBe(true);
      const before = told;
      await devnet.fund(devnet.accounts[1]!.address, { usd: 1n });
      await expect.poll(() => told, { timeout: 10_000 }).toBeGreaterThan(before);
      expect(lines().filter((line) => Number(line.level) >= 40)).toHaveLength(1);
    } finally {
      release();
      await proxy.close();
    }
  });
});
