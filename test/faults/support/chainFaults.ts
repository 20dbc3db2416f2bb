/**
 * Outbox kinds whose transactions the facilitators follow through a reorganisation (each registers an
 * outbox reopen hook): a block holding only these may be undone. Relayed calls (`relay`: subscription
 * creations, channel opens) and nonce fillers are not followed, and a block holding one is never
 * undone. A kind that gains a reopen hook (`outbox.onReorg`) belongs here. (Channel closes happen after
 * the faults in this suite, so none is undone today.)
 */
const FOLLOWED_KINDS = new Set(["settlement", "renewal", "usage", "channel-claim", "channel-close"]);

/**
 * The chain's misbehaviours, beside the process kills of the fault suite: the newest blocks undone
 * (`anvil_rollback`) or replaced by empty ones (`anvil_reorg`), a base-fee spike, a storm of HTTP 429s
 * from the RPC provider, and a provider whose node stops following the chain for a while. The first two
 * act on anvil itself; the last two on the RPC fault proxy (test/support/rpcFaultProxy.ts) that stands
 * between the facilitators and anvil. The suite's own reads (its reconciliation) go to anvil directly.
 */
import type { RpcFaultProxy, RpcFaults } from "../../support/rpcFaultProxy.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const hex = (n: bigint) => `0x${n.toString(16)}`;

type Block = { number: string; baseFeePerGas?: string; transactions: { hash: string; from: string }[] };

export type ChainFaults = {
  /**
   * Undoes the newest blocks, at most `maxDepth`, when they hold only the facilitators' transactions of
   * the kinds they follow through a reorganisation (`FOLLOWED_KINDS`: one-time settlement batches,
   * renewals, usage deductions, channel claims and closes), by `anvil_rollback` (the chain is shorter after it) or
   * `anvil_reorg` (the same height, the blocks replaced by empty ones). Automining is held while the
   * blocks are read and undone, so no block lands in between. Returns the transactions undone by kind
   * (empty when the newest block held anything else: nothing was undone).
   */
  undoBlocks(how: "rollback" | "reorg", maxDepth: number): Promise<Map<string, number>>;
  /**
   * Holds the base fee at 100× the gas price anvil quotes (base fee and tip) for `ms`, mining an empty
   * block every 500 ms as a live chain goes on making blocks, then puts it back where it was.
   */
  feeSpike(ms: number): Promise<void>;
  /** The provider answers HTTP 429 to every `every`th request for `ms`. */
  rateLimitStorm(ms: number, every: number): Promise<void>;
  /** The provider's node stops at the current head for `ms` (rpcFaultProxy.ts `staleHead`), then catches up. */
  staleHead(ms: number): Promise<void>;
};

export function createChainFaults(options: {
  /** anvil itself, not the proxy. */
  anvilUrl: string;
  proxy: RpcFaultProxy;
  /** The facilitators' gas account (lower-case or not). */
  gasAddress: string;
  query<T>(sql: string, params?: unknown[]): Promise<T[]>;
}): ChainFaults {
  const gas = options.gasAddress.toLowerCase();
  let nextId = 1;

  async function rpc<T>(method: string, params: unknown[] = []): Promise<T> {
    const response = await fetch(options.anvilUrl, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method, params }),
      signal: AbortSignal.timeout(10_000),
    });
    const body = (await response.json()) as { result?: T; error?: { message: string } };
    if (body.error !== undefined) throw new Error(`${method}: ${body.error.message}`);
    return body.result as T;
  }

  // The proxy's faults are a merge of those in force, so a storm and a stale head may overlap.
  const active = new Map<string, RpcFaults>();
  const apply = () => options.proxy.set(Object.assign({}, ...active.values()) as RpcFaults);
  async function withProxyFault(name: string, faults: RpcFaults, ms: number): Promise<void> {
    active.set(name, faults);
    apply();
    try {
      await sleep(ms);
    } finally {
      active.delete(name);
      apply();
    }
  }

  /** The kinds of the block's transactions, when all are the gas account's of a followed kind. */
  async function followedIn(block: Block): Promise<string[] | undefined> {
    if (block.transactions.length === 0) return undefined;
    if (block.transactions.some((tx) => tx.from.toLowerCase() !== gas)) return undefined;
    const hashes = block.transactions.map((tx) => tx.hash.toLowerCase());
    const rows = await options.query<{ kind: string; tx_hash: string; replaced_hashes: string[] }>(
      "SELECT kind, tx_hash, replaced_hashes FROM tx_outbox WHERE tx_hash = ANY($1) OR replaced_hashes && $1",
      [hashes],
    );
    const kindOf = new Map<string, string>();
    for (const row of rows)
      for (const hash of [row.tx_hash, ...row.replaced_hashes]) kindOf.set(hash, row.kind);
    const kinds = hashes.map((h) => kindOf.get(h) ?? "unknown");
    return kinds.every((k) => FOLLOWED_KINDS.has(k)) ? kinds : undefined;
  }

  return {
    async undoBlocks(how, maxDepth) {
      await rpc("evm_setAutomine", [false]);
      try {
        const head = BigInt(await rpc<string>("eth_blockNumber"));
        let depth = 0;
        const undone = new Map<string, number>();
        for (; depth < maxDepth && head - BigInt(depth) > 0n; depth++) {
          const block = await rpc<Block>("eth_getBlockByNumber", [hex(head - BigInt(depth)), true]);
          const kinds = await followedIn(block);
          if (kinds === undefined) break;
          for (const kind of kinds) undone.set(kind, (undone.get(kind) ?? 0) + 1);
        }
        if (depth === 0) return undone;
        if (how === "rollback") await rpc("anvil_rollback", [depth]);
        else await rpc("anvil_reorg", [depth, []]);
        return undone;
      } finally {
        // Whatever was sent meanwhile waits in the pool; automining again mines it.
        await rpc("evm_setAutomine", [true]);
      }
    },

    async feeSpike(ms) {
      const latest = await rpc<Block>("eth_getBlockByNumber", ["latest", false]);
      const before = BigInt(latest.baseFeePerGas ?? "0x0");
      // anvil's base fee falls to a few wei on a chain of small blocks, below the tip it suggests: 100×
      // of it alone would not reach what a transaction offers. 100× what a transaction pays does.
      const spiked = BigInt(await rpc<string>("eth_gasPrice")) * 100n;
      const until = Date.now() + ms;
      let lastBlockAt = 0;
      while (Date.now() < until) {
        try {
          // Each block's base fee follows from the last one's (EIP-1559); set it before every block.
          await rpc("anvil_setNextBlockBaseFeePerGas", [hex(spiked)]);
          if (Date.now() - lastBlockAt >= 500) {
            await rpc("evm_mine");
            lastBlockAt = Date.now();
          }
        } catch {
          // anvil restarting: the spike goes on when it is back.
        }
        await sleep(20);
      }
      for (let i = 0; i < 30; i++) {
        try {
          await rpc("anvil_setNextBlockBaseFeePerGas", [hex(before)]);
          await rpc("evm_mine");
          return;
        } catch {
          await sleep(1_000);
        }
      }
    },

    rateLimitStorm: (ms, every) => withProxyFault("rateLimit", { rateLimitEvery: every }, ms),

    async staleHead(ms) {
      const head = BigInt(await rpc<string>("eth_blockNumber"));
      await withProxyFault("staleHead", { staleHead: head }, ms);
    },
  };
}
