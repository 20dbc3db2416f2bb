/**
 * Tells the facilitator's chain followers (the subscription indexer, the channel claim worker) when the
 * contracts they follow may have new logs, so they read the chain then and not on a timer.
 *
 * How, by what the RPC offers:
 * - WebSocket (`eth_subscribe` "logs" for the followed addresses): the node pushes each log; nothing is
 *   polled. Used when the client's transport is a WebSocket, or on a devnet, whose node (anvil) serves
 *   WebSocket on its HTTP port.
 * - Otherwise, on a chain with a known block time (viem's `chain.blockTime`, 2 s on Base): one
 *   `eth_blockNumber` per block time, and the followers are told when it moves.
 * - Otherwise (an automining devnet without WebSocket): nothing; the followers' backstop reads find
 *   what there is.
 * - A provider that refuses WebSocket (its HTTP side answers, its socket never opened: a devnet's URL
 *   behind a proxy, whose ws:// is derived from http://) is not asked again: the watch reads the head
 *   every block time instead (`pollMs`, 1 s, on a chain without one), and says so once.
 *
 * Invariant: a follower never depends on being told. A lost push, a dropped socket or a missed block
 * only delays it until its own backstop read (wakeablePause.ts, `IDLE_BACKSTOP_MS`), which reads from its
 * own cursor; and every follower is told once when a subscription (re)starts, so what happened while the
 * socket was down is read then.
 */
import type { Logger } from "pino";
import {
  type Address,
  type Chain,
  createPublicClient,
  type PublicClient,
  type Transport,
  webSocket,
} from "viem";
import { getNetworkConfig } from "../chain/networks.ts";
import { redactRpcUrl, redactRpcUrlsIn } from "../chain/rpcUrls.ts";

export type ChainWatch = {
  /** Calls `listener` whenever `address` may have new logs. Returns a function that stops it. */
  watch(address: Address, listener: () => void): () => void;
  /** How the chain is watched (for logs and tests). */
  readonly mode: () => "websocket" | "blocks" | "none";
};

type Listener = { address: string; fn: () => void };

/** The client a watch reads from: a viem public client (its transport says where the node is). */
export type WatchedClient = Pick<PublicClient<Transport, Chain>, "getBlockNumber" | "chain" | "transport">;

/** The WebSocket URL of a client's node, when it has one. */
export function webSocketUrlOf(client: WatchedClient, devnet: boolean): string | undefined {
  const transport = client.transport as { type?: string; url?: string };
  if (transport.type === "webSocket" && typeof transport.url === "string") return transport.url;
  const fromChain = client.chain?.rpcUrls.default.webSocket?.[0];
  if (fromChain !== undefined) return fromChain;
  // rpcTransport's fallback over several URLs gives its first as `url`.
  const httpLike = transport.type === "http" || transport.type === "fallback";
  if (devnet && httpLike && typeof transport.url === "string" && /^https?:/.test(transport.url)) {
    // anvil answers WebSocket upgrades on its HTTP port.
    return transport.url.replace(/^http/, "ws");
  }
  return undefined;
}

const watches = new WeakMap<object, { watch: ChainWatch; users: number; close(): void }>();

/**
 * The chain watch shared by every follower of one client (created on first use, closed when its last
 * follower stops). `resubscribeMs` (default 5 000, shorter in tests) is the wait between attempts after
 * the socket fails; it applies to the watch this call creates, not to one already shared.
 */
export function acquireChainWatch(
  client: WatchedClient,
  logger: Logger,
  options: { resubscribeMs?: number; pollMs?: number } = {},
): { watch: ChainWatch; release(): void } {
  let entry = watches.get(client);
  if (entry === undefined) {
    const chainId = client.chain?.id;
    const devnet = chainId !== undefined && getNetworkConfig(`eip155:${chainId}`)?.isDevnet === true;
    const created = createChainWatch(client, {
      devnet,
      logger,
      resubscribeMs: options.resubscribeMs ?? RESUBSCRIBE_MS,
      pollMs: options.pollMs ?? POLL_MS,
    });
    entry = { watch: created, users: 0, close: created.close };
    watches.set(client, entry);
  }
  const shared = entry;
  shared.users++;
  let released = false;
  return {
    watch: shared.watch,
    release() {
      if (released) return;
      released = true;
      shared.users--;
      if (shared.users === 0) {
        watches.delete(client);
        shared.close();
      }
    },
  };
}

const RESUBSCRIBE_MS = 5_000;
/** How often a watch whose provider refuses WebSocket reads the head on a chain without a block time. */
const POLL_MS = 1_000;

function createChainWatch(
  client: WatchedClient,
  options: { devnet: boolean; logger: Logger; resubscribeMs: number; pollMs: number },
): ChainWatch & { close(): void } {
  const log = options.logger.child({ component: "chain-watch" });
  const listeners = new Set<Listener>();
  const wsUrl = webSocketUrlOf(client, options.devnet);
  const blockTimeMs = client.chain?.blockTime;
  /** How often block polling reads the head. */
  let pollMs = blockTimeMs;
  /** The URL as logs print it: a provider's key stays out of them. */
  const shownUrl = wsUrl === undefined ? undefined : redactRpcUrl(wsUrl);
  const secrets = wsUrl === undefined ? [] : [wsUrl];
  /**
   * A socket's failure in one line, its URL redacted: what fails may be an error event carrying the whole
   * socket (its request line and URL included), never logged as it is.
   */
  const describe = (error: unknown): string => {
    const e = error as { message?: unknown; error?: { message?: unknown } } | null;
    const text =
      typeof e?.message === "string"
        ? e.message
        : typeof e?.error?.message === "string"
          ? e.error.message
          : String(error);
    return redactRpcUrlsIn(text, secrets).slice(0, 500);
  };
  /** Whether a socket ever opened: a provider whose socket never did, while HTTP answers, refuses WebSocket. */
  let everOpened = false;
  let mode: "websocket" | "blocks" | "none" =
    wsUrl !== undefined ? "websocket" : blockTimeMs ? "blocks" : "none";
  let closed = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopSubscription: (() => void) | undefined;
  /** Closes the socket (viem keeps one per URL; only `close` ends it). */
  let closeSocket: (() => void) | undefined;
  let subscribedTo = "";
  /** Whether the subscription is down: its outage was reported once, at warn; the rest go to debug. */
  let failing = false;
  const failed = (error: unknown, message: string) => {
    const reason = describe(error);
    if (failing) log.debug({ reason, url: shownUrl }, message);
    else log.warn({ reason, url: shownUrl }, message);
    failing = true;
  };

  const tellAll = () => {
    for (const l of listeners) l.fn();
  };
  const tell = (address: string) => {
    for (const l of listeners) if (l.address === address) l.fn();
  };
  const addresses = () => [...new Set([...listeners].map((l) => l.address))].sort();

  // ---- WebSocket -----------------------------------------------------------------------------------

  async function subscribe(): Promise<void> {
    const wanted = addresses();
    const key = wanted.join(",");
    if (closed || key === subscribedTo) return;
    stopSubscription?.();
    stopSubscription = undefined;
    subscribedTo = key;
    if (wanted.length === 0) return;
    const socket = createPublicClient({
      chain: client.chain,
      // Reconnecting is the watch's own (`retry`): viem's would also print each failed attempt to the
      // console, and keep reconnecting a socket the watch no longer holds.
      transport: webSocket(wsUrl, { retryCount: 0, timeout: 5_000, reconnect: false }),
    });
    try {
      // The socket first, held: however this attempt ends, the watch can close it.
      let rpc: Awaited<ReturnType<typeof socket.transport.getRpcClient>>;
      try {
        rpc = await socket.transport.getRpcClient();
      } catch (error) {
        if (!closed && !everOpened && (await httpAnswers())) {
          refused(error);
          return;
        }
        throw error;
      }
      everOpened = true;
      closeSocket = () => rpc.close();
      if (closed) {
        closeSocket();
        return;
      }
      const { unsubscribe } = await socket.transport.subscribe({
        params: ["logs", { address: wanted as Address[] }],
        onData: (data: object) => {
          const result: unknown = "result" in data ? data.result : undefined;
          const raw = (result as { address?: unknown } | undefined)?.address;
          const address = typeof raw === "string" ? raw.toLowerCase() : undefined;
          if (address === undefined) tellAll();
          else tell(address);
        },
        onError: (error: unknown) => {
          // Closing the watch closes the socket, which reports itself closed: not a failure.
          if (closed) return;
          failed(error, "chain log subscription failed; followers read on their backstop");
          retry();
        },
      });
      stopSubscription = () => {
        unsubscribe().catch(() => undefined);
      };
      if (closed) {
        closeSocket();
        return;
      }
      if (subscribedTo !== key) {
        stopSubscription();
        return;
      }
      if (failing) {
        failing = false;
        log.info({ url: shownUrl }, "chain log subscription restored");
      }
      // Whatever happened before the subscription began (or while it was down) is read now.
      tellAll();
    } catch (error) {
      if (closed) {
        closeSocket?.();
        return;
      }
      failed(error, "cannot subscribe to chain logs over WebSocket; retrying");
      retry();
    }
  }

  function retry(): void {
    const stop = stopSubscription;
    stopSubscription = undefined;
    stop?.();
    // A socket that failed is not used again: the next attempt opens its own. Its handle is dropped
    // before it is closed: closing reports the close to every request and subscription still on it,
    // whose errors come back here, and must find nothing left to close.
    const close = closeSocket;
    closeSocket = undefined;
    subscribedTo = "";
    close?.();
    if (closed || timer !== undefined) return;
    timer = setTimeout(() => {
      timer = undefined;
      void subscribe();
    }, options.resubscribeMs);
    timer.unref?.();
  }

  /** Whether the node answers over HTTP (asked only when a first socket failed to open). */
  async function httpAnswers(): Promise<boolean> {
    try {
      await client.getBlockNumber({ cacheTime: 0 });
      return true;
    } catch {
      return false;
    }
  }

  /** The provider refuses WebSocket: the watch polls the head from now on and never opens a socket again. */
  function refused(error: unknown): void {
    mode = "blocks";
    pollMs = blockTimeMs ?? options.pollMs;
    subscribedTo = "";
    log.warn(
      { reason: describe(error), url: shownUrl, pollMs },
      `the RPC provider refuses WebSocket; watching the chain by reading its head every ${pollMs} ms`,
    );
    pollBlocks();
  }

  // ---- block polling -------------------------------------------------------------------------------

  let lastBlock: bigint | undefined;
  function pollBlocks(): void {
    if (closed || listeners.size === 0 || timer !== undefined) return;
    timer = setTimeout(async () => {
      try {
        const block = await client.getBlockNumber({ cacheTime: 0 });
        if (lastBlock === undefined || block !== lastBlock) {
          lastBlock = block;
          tellAll();
        }
      } catch {
        // The followers' own reads report an unreachable chain.
      }
      timer = undefined;
      pollBlocks();
    }, pollMs);
    timer.unref?.();
  }

  log.debug({ mode, url: shownUrl }, "watching the chain");
  return {
    mode: () => mode,
    watch(address, fn) {
      const listener = { address: address.toLowerCase(), fn };
      listeners.add(listener);
      if (mode === "websocket") void subscribe();
      else if (mode === "blocks") pollBlocks();
      return () => {
        listeners.delete(listener);
        if (mode === "websocket") void subscribe();
      };
    },
    close() {
      closed = true;
      mode = "none";
      if (timer !== undefined) clearTimeout(timer);
      stopSubscription?.();
      closeSocket?.();
    },
  };
}
