import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { BaseError, createPublicClient, HttpRequestError, http, type PublicClient, zeroHash } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { simulateTransferWithAuthorization } from "./actions/usd/simulateTransferWithAuthorization.ts";
import { batchingHttp } from "./batchingHttp.ts";
import { type Devnet, startDevnet } from "./startDevnet.ts";

/**
 * A JSON-RPC proxy in front of the devnet that records every HTTP request's body as the node saw it,
 * and can refuse batches or hold back one method's answers.
 */
type Proxy = {
  url: string;
  bodies: unknown[];
  refuseBatches: "no" | "as-json-rpc" | "as-http-400";
  /** Milliseconds the proxy waits before forwarding a request carrying this method. */
  delays: Map<string, number>;
  close(): Promise<void>;
};

async function startProxy(target: string): Promise<Proxy> {
  const proxy: Proxy = {
    url: "",
    bodies: [],
    refuseBatches: "no",
    delays: new Map(),
    close: async () => {},
  };
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    const body: unknown = JSON.parse(text);
    proxy.bodies.push(body);
    if (Array.isArray(body) && proxy.refuseBatches !== "no") {
      const status = proxy.refuseBatches === "as-http-400" ? 400 : 200;
      res.writeHead(status, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32600, message: "no batches here" } }),
      );
      return;
    }
    const methods = (Array.isArray(body) ? body : [body]).map((call) => (call as { method: string }).method);
    const delay = Math.max(0, ...methods.map((m) => proxy.delays.get(m) ?? 0));
    if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
    const answer = await fetch(target, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: text,
    });
    res.writeHead(answer.status, { "content-type": "application/json" });
    res.end(await answer.text());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  proxy.close = () => new Promise((resolve) => server.close(() => resolve()));
  return proxy;
}

const isBatch = (body: unknown) => Array.isArray(body);
const methodsOf = (body: unknown) =>
  (Array.isArray(body) ? body : [body]).map((call) => (call as { method: string }).method);

let devnet: Devnet;
let proxy: Proxy;
let head: bigint;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 2 });
  proxy = await startProxy(devnet.rpcUrl);
  // Enough blocks that every call of a test can ask for a block of its own (viem answers identical
  // concurrent calls with one request).
  await devnet.mine(80);
  head = await devnet.publicClient.getBlockNumber();
});
afterAll(async () => {
  await proxy.close();
  await devnet.stop();
});

function clientOf(options: Parameters<typeof batchingHttp>[1] = {}): PublicClient {
  proxy.bodies.length = 0;
  proxy.delays.clear();
  proxy.refuseBatches = "no";
  return createPublicClient({ chain: devnet.chain, transport: batchingHttp(proxy.url, options) });
}

/** Blocks 0…n-1 read at once: each answer names its own block, so a mixed-up answer shows. */
async function readBlocks(client: PublicClient, n: number): Promise<bigint[]> {
  expect(BigInt(n)).toBeLessThanOrEqual(head + 1n);
  const numbers = Array.from({ length: n }, (_, i) => BigInt(i));
  const blocks = await Promise.all(numbers.map((blockNumber) => client.getBlock({ blockNumber })));
  for (const [i, block] of blocks.entries()) expect(block.number).toBe(numbers[i]);
  return numbers;
}

/** A transfer authorization whose signature is garbage: simulating it reverts. */
function revertingSimulation(client: PublicClient) {
  const payer = privateKeyToAccount(generatePrivateKey()).address;
  return simulateTransferWithAuthorization(client, {
    token: devnet.contracts.usd,
    authorization: {
      from: payer,
      to: devnet.accounts[1]!.address,
      value: 1n,
      validAfter: 0n,
      validBefore: 2n ** 40n,
      nonce: zeroHash,
    },
    signature: `0x${"11".repeat(65)}`,
    account: devnet.contracts.batchSettler,
  });
}

describe("batchingHttp", () => {
  it("sends a call at once when no request is open", async () => {
    const client = clientOf();
    for (let i = 0n; i < 5n; i++) await client.getBlock({ blockNumber: i });
    expect(proxy.bodies).toHaveLength(5);
    expect(proxy.bodies.some(isBatch)).toBe(false);
  });

  it("batches the calls that wait for the open request, and gives each caller its own answer", async () => {
    const client = clientOf({ maxWaitMs: 60_000, maxBatchSize: 25 });
    await readBlocks(client, 60);
    // The first call leaves alone; the 59 that waited behind it go in batches of at most 25.
    expect(proxy.bodies.length).toBeLessThanOrEqual(4);
    expect(isBatch(proxy.bodies[0])).toBe(false);
    const sizes = proxy.bodies.slice(1).map((body) => (body as unknown[]).length);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(59);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(25);
  });

  it("fails only the reverting call of a batch, with the error a plain HTTP transport gives", async () => {
    const plain = createPublicClient({ chain: devnet.chain, transport: http(devnet.rpcUrl) });
    const expected = await revertingSimulation(plain).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(expected).toBeInstanceOf(BaseError);

    const client = clientOf({ maxWaitMs: 60_000 });
    const blocker = client.getBlockNumber();
    const [before, reverted, after] = await Promise.allSettled([
      client.getBlock({ blockNumber: 0n }),
      revertingSimulation(client),
      client.getBlock({ blockNumber: 1n }),
    ]);
    await blocker;
    expect(proxy.bodies.filter(isBatch)).toHaveLength(1);
    expect(before.status === "fulfilled" && before.value.number).toBe(0n);
    expect(after.status === "fulfilled" && after.value.number).toBe(1n);
    expect(reverted.status).toBe("rejected");
    const error = (reverted as PromiseRejectedResult).reason as BaseError;
    expect(error.name).toBe((expected as BaseError).name);
    expect(error.shortMessage).toBe((expected as BaseError).shortMessage);
  });

  it.each([
    ["answers one JSON-RPC error", "as-json-rpc"],
    ["answers HTTP 400", "as-http-400"],
  ] as const)("sends the calls one by one, each answered, when the node %s to a batch", async (_, how) => {
    const refusals: string[] = [];
    const client = clientOf({ maxWaitMs: 60_000, onBatchRefused: (reason) => refusals.push(reason) });
    proxy.refuseBatches = how;
    await readBlocks(client, 20);
    expect(refusals).toHaveLength(1);
    expect(proxy.bodies.filter(isBatch)).toHaveLength(1);
    // From then on nothing is batched, however many calls wait.
    const seen = proxy.bodies.length;
    await readBlocks(client, 20);
    expect(proxy.bodies.slice(seen).some(isBatch)).toBe(false);
    expect(proxy.bodies.length - seen).toBe(20);
    expect(refusals).toHaveLength(1);
  });

  it("sends a transaction at once, past calls waiting for the open request", async () => {
    const client = clientOf({ maxWaitMs: 60_000 });
    proxy.delays.set("eth_blockNumber", 400);
    const slow = client.getBlockNumber();
    const waiting = client.getChainId();
    // An invalid raw transaction is refused by the node, but only the order of arrival matters here.
    await client.sendRawTransaction({ serializedTransaction: "0x02" }).catch(() => undefined);
    expect(methodsOf(proxy.bodies.at(-1))).toEqual(["eth_sendRawTransaction"]);
    expect(proxy.bodies.flatMap(methodsOf)).not.toContain("eth_chainId");
    await Promise.all([slow, waiting]);
    expect(proxy.bodies.flatMap(methodsOf)).toContain("eth_chainId");
  });

  it("opens another request for a call that waited maxWaitMs behind a slow one, up to maxInFlight", async () => {
    let client = clientOf({ maxWaitMs: 30 });
    proxy.delays.set("eth_blockNumber", 1_000);
    let slowDone = false;
    let slow = client.getBlockNumber().then(() => (slowDone = true));
    // Answered while the slow call still holds the first request.
    await client.getBlock({ blockNumber: 3n });
    expect(slowDone).toBe(false);
    expect(proxy.bodies.flatMap(methodsOf)).toEqual(["eth_blockNumber", "eth_getBlockByNumber"]);
    await slow;

    client = clientOf({ maxWaitMs: 30, maxInFlight: 1 });
    proxy.delays.set("eth_blockNumber", 300);
    slowDone = false;
    slow = client.getBlockNumber().then(() => (slowDone = true));
    await client.getBlock({ blockNumber: 3n });
    // With one request at most, it waited for the slow one.
    expect(slowDone).toBe(true);
  });

  it("rejects every waiting call with the HTTP error when the node cannot be reached", async () => {
    const client = createPublicClient({
      chain: devnet.chain,
      transport: batchingHttp("http://127.0.0.1:9", { retryCount: 0 }),
    });
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => client.getBlockNumber()));
    for (const result of results) {
      expect(result.status).toBe("rejected");
      let http: HttpRequestError | undefined;
      ((result as PromiseRejectedResult).reason as BaseError).walk((e) => {
        if (e instanceof HttpRequestError) http = e;
        return false;
      });
      expect(http).toBeInstanceOf(HttpRequestError);
    }
  });
});
