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

/** A watch's state, shared by its steps below. */
type Watch = {
  client: WatchedClient;
  options: { devnet: boolean; logger: Logger; resubscribeMs: number; pollMs: number };
  log: Logger;
  listeners: Set<Listener>;
  wsUrl: string | undefined;
  blockTimeMs: number | undefined;
  /** How often block polling reads the head. */
  pollMs: number | undefined;
  /** The URL as logs print it: a provider's key stays out of them. */
  shownUrl: string | undefined;
  secrets: string[];
  /** Whether a socket ever opened: a provider whose socket never did, while HTTP answers, refuses WebSocket. */
  everOpened: boolean;
  mode: "websocket" | "blocks" | "none";
  closed: boolean;
  timer: ReturnType<typeof setTimeout> | undefined;
  stopSubscription: (() => void) | undefined;
  /** Closes the socket (viem keeps one per URL; only `close` ends it). */
  closeSocket: (() => void) | undefined;
  subscribedTo: string;
  /** Whether the subscription is down: its outage was reported once, at warn; the rest go to debug. */
  failing: boolean;
  lastBlock: bigint | undefined;
};

function createChainWatch(
  client: WatchedClient,
  options: { devnet: boolean; logger: Logger; resubscribeMs: number; pollMs: number },
): ChainWatch & { close(): void } {
  const wsUrl = webSocketUrlOf(client, options.devnet);
  const blockTimeMs = client.chain?.blockTime;
  const w: Watch = {
    client,
    options,
    log: options.logger.child({ component: "chain-watch" }),
    listeners: new Set(),
    wsUrl,
    blockTimeMs,
    pollMs: blockTimeMs,
    shownUrl: wsUrl === undefined ? undefined : redactRpcUrl(wsUrl),
    secrets: wsUrl === undefined ? [] : [wsUrl],
    everOpened: false,
    mode: wsUrl !== undefined ? "websocket" : blockTimeMs ? "blocks" : "none",
    closed: false,
    timer: undefined,
    stopSubscription: undefined,
    closeSocket: undefined,
    subscribedTo: "",
    failing: false,
    lastBlock: undefined,
  };

  w.log.debug({ mode: w.mode, url: w.shownUrl }, "watching the chain");
  return {
    mode: () => w.mode,
    watch(address, fn) {
      const listener = { address: address.toLowerCase(), fn };
      w.listeners.add(listener);
      if (w.mode === "websocket") void subscribe(w);
      else if (w.mode === "blocks") pollBlocks(w);
      return () => {
        w.listeners.delete(listener);
        if (w.mode === "websocket") void subscribe(w);
      };
    },
    close() {
      w.closed = true;
      w.mode = "none";
      if (w.timer !== undefined) clearTimeout(w.timer);
      w.stopSubscription?.();
      w.closeSocket?.();
    },
  };
}

/**
 * A socket's failure in one line, its URL redacted: what fails may be an error event carrying the whole
 * socket (its request line and URL included), never logged as it is.
 */
function describe(w: Watch, error: unknown): string {
  const e = error as { message?: unknown; error?: { message?: unknown } } | null;
  const text =
    typeof e?.message === "string"
      ? e.message
      : typeof e?.error?.message === "string"
        ? e.error.message
        : String(error);
  return redactRpcUrlsIn(text, w.secrets).slice(0, 500);
}

/** Reports a subscription failure: at warn the first time of an outage, at debug after. */
function failed(w: Watch, error: unknown, message: string): void {
  const reason = describe(w, error);
  if (w.failing) w.log.debug({ reason, url: w.shownUrl }, message);
  else w.log.warn({ reason, url: w.shownUrl }, message);
  w.failing = true;
}

function tellAll(w: Watch): void {
  for (const l of w.listeners) l.fn();
}

function tell(w: Watch, address: string): void {
  for (const l of w.listeners) if (l.address === address) l.fn();
}

function addresses(w: Watch): string[] {
  return [...new Set([...w.listeners].map((l) => l.address))].sort();
}

// ---- WebSocket -------------------------------------------------------------------------------------

/** Subscribes to the logs of the addresses listened to now, on a new socket, unless it already is. */
async function subscribe(w: Watch): Promise<void> {
  const wanted = addresses(w);
  const key = wanted.join(",");
  if (w.closed || key === w.subscribedTo) return;
  w.stopSubscription?.();
  w.stopSubscription = undefined;
  w.subscribedTo = key;
  if (wanted.length === 0) return;
  const socket = createPublicClient({
    chain: w.client.chain,
    // Reconnecting is the watch's own (`retry`): viem's would also print each failed attempt to the
    // console, and keep reconnecting a socket the watch no longer holds.
    transport: webSocket(w.wsUrl, { retryCount: 0, timeout: 5_000, reconnect: false }),
  });
  try {
    // The socket first, held: however this attempt ends, the watch can close it.
    let rpc: Awaited<ReturnType<typeof socket.transport.getRpcClient>>;
    try {
      rpc = await socket.transport.getRpcClient();
    } catch (error) {
      if (!w.closed && !w.everOpened && (await httpAnswers(w.client))) {
        refused(w, error);
        return;
      }
      throw error;
    }
    w.everOpened = true;
    w.closeSocket = () => rpc.close();
    if (w.closed) {
      w.closeSocket();
      return;
    }
    const { unsubscribe } = await socket.transport.subscribe({
      params: ["logs", { address: wanted as Address[] }],
      onData: (data: object) => onLog(w, data),
      onError: (error: unknown) => {
        // Closing the watch closes the socket, which reports itself closed: not a failure.
        if (w.closed) return;
        failed(w, error, "chain log subscription failed; followers read on their backstop");
        retry(w);
      },
    });
    w.stopSubscription = () => {
      unsubscribe().catch(() => undefined);
    };
    if (w.closed) {
      w.closeSocket();
      return;
    }
    if (w.subscribedTo !== key) {
      w.stopSubscription();
      return;
    }
    if (w.failing) {
      w.failing = false;
      w.log.info({ url: w.shownUrl }, "chain log subscription restored");
    }
    // Whatever happened before the subscription began (or while it was down) is read now.
    tellAll(w);
  } catch (error) {
    if (w.closed) {
      w.closeSocket?.();
      return;
    }
    failed(w, error, "cannot subscribe to chain logs over WebSocket; retrying");
    retry(w);
  }
}

/** A log pushed by the node: its address's listeners are told (every listener when it names none). */
function onLog(w: Watch, data: object): void {
  const result: unknown = "result" in data ? data.result : undefined;
  const raw = (result as { address?: unknown } | undefined)?.address;
  const address = typeof raw === "string" ? raw.toLowerCase() : undefined;
  if (address === undefined) tellAll(w);
  else tell(w, address);
}

/** Drops the failed subscription and its socket, and subscribes again after `resubscribeMs`. */
function retry(w: Watch): void {
  const stop = w.stopSubscription;
  w.stopSubscription = undefined;
  stop?.();
  // A socket that failed is not used again: the next attempt opens its own. Its handle is dropped
  // before it is closed: closing reports the close to every request and subscription still on it,
  // whose errors come back here, and must find nothing left to close.
  const close = w.closeSocket;
  w.closeSocket = undefined;
  w.subscribedTo = "";
  close?.();
  if (w.closed || w.timer !== undefined) return;
  w.timer = setTimeout(() => {
    w.timer = undefined;
    void subscribe(w);
  }, w.options.resubscribeMs);
  w.timer.unref?.();
}

/** Whether the node answers over HTTP (asked only when a first socket failed to open). */
async function httpAnswers(client: WatchedClient): Promise<boolean> {
  try {
    await client.getBlockNumber({ cacheTime: 0 });
    return true;
  } catch {
    return false;
  }
}

/** The provider refuses WebSocket: the watch polls the head from now on and never opens a socket again. */
function refused(w: Watch, error: unknown): void {
  w.mode = "blocks";
  w.pollMs = w.blockTimeMs ?? w.options.pollMs;
  w.subscribedTo = "";
  w.log.warn(
    { reason: describe(w, error), url: w.shownUrl, pollMs: w.pollMs },
    `the RPC provider refuses WebSocket; watching the chain by reading its head every ${w.pollMs} ms`,
  );
  pollBlocks(w);
}

// ---- block polling ---------------------------------------------------------------------------------

/** Reads the head every `pollMs` while anyone listens, and tells every listener when it moved. */
function pollBlocks(w: Watch): void {
  if (w.closed || w.listeners.size === 0 || w.timer !== undefined) return;
  w.timer = setTimeout(async () => {
    try {
      const block = await w.client.getBlockNumber({ cacheTime: 0 });
      if (w.lastBlock === undefined || block !== w.lastBlock) {
        w.lastBlock = block;
        tellAll(w);
      }
    } catch {
      // The followers' own reads report an unreachable chain.
    }
    w.timer = undefined;
    pollBlocks(w);
  }, w.pollMs);
  w.timer.unref?.();
}
