/**
 * A viem HTTP transport that sends a JSON-RPC call at once when no other request is open, and the
 * calls made while one is open as a JSON-RPC batch (up to `maxBatchSize`) as soon as it returns. An
 * idle facilitator's calls go out at once, as with viem's `http()`; a burst — hundreds of payments
 * checked after a block, each simulated with an `eth_call` — costs a handful of HTTP requests instead
 * of one request (and, at once, one new connection) per call. Measured at 512 payers on 2-second blocks
 * (docs/facilitator.md, "RPC calls"): 0.16–0.25 HTTP requests per payment against 1.15, 4.3–5.2 ms of
 * the bench process's CPU per payment against 5.9–6.8, 98–113 paid requests/s against 94–96.
 *
 * One lane, with a bound on the wait: a call that has waited `maxWaitMs` (a slow call holding the
 * lane, a remote node) opens another request beside it, up to `maxInFlight` open at once. More lanes
 * from the start batch less and cost more: with four, the same bench sent 0.7 requests per payment and
 * was no faster than viem's `http()`.
 *
 * Invariants:
 * - Every call is answered exactly once: with its own result, with viem's `RpcRequestError` for its
 *   own JSON-RPC error, or with the HTTP error of the request that carried it. One call's revert never
 *   fails another call of its batch.
 * - Transactions (`eth_sendRawTransaction`, `eth_sendTransaction`), log queries (`eth_getLogs`, which
 *   can be slow) and calls with an abort signal never wait and are never batched: a settlement's
 *   broadcast does not queue behind checks.
 * - A node that refuses batches (answers one error for the whole batch, or a 4xx other than a rate
 *   limit) gets each call of that batch again on its own, and no batch afterwards; `onBatchRefused`
 *   hears of it once.
 *
 * viem's own `http({ batch })` waits a timer turn before every request, idle or not (~1 ms on each of
 * a payment's sequential calls), and puts no bound on the requests open at once; hence this one.
 */
import {
  createTransport,
  type EIP1193RequestFn,
  type HttpTransport,
  RpcRequestError,
  UrlRequiredError,
} from "viem";
import { getHttpRpcClient } from "viem/utils";

export type BatchingHttpOptions = {
  /** Milliseconds a call waits for the open request before it opens another one. Default 50. */
  maxWaitMs?: number | undefined;
  /** The most HTTP requests open at once, however long calls have waited. Default 4. */
  maxInFlight?: number | undefined;
  /** The most calls in one JSON-RPC batch (providers cap it; 100 is within every common cap). Default 100. */
  maxBatchSize?: number | undefined;
  fetchFn?: typeof fetch | undefined;
  /** Retries of a failed call (viem's rules: rate limits, 5xx, timeouts). Default 1. */
  retryCount?: number | undefined;
  /** Milliseconds per HTTP request. Default 10 000. */
  timeout?: number | undefined;
  /** Called once when the node refuses a batch; calls go one by one from then on. */
  onBatchRefused?: ((reason: string) => void) | undefined;
};

type RpcAnswer = { id?: unknown; result?: unknown; error?: unknown };

type Waiting = {
  body: { method: string; params?: unknown };
  /** `performance.now()` when the call was made. */
  since: number;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
};

const UNBATCHED_METHODS = new Set(["eth_sendRawTransaction", "eth_sendTransaction", "eth_getLogs"]);

/** A 4xx answer to a batch that says "not like this" rather than "not now". */
const refusesBatch = (status: number | undefined) =>
  status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;

/** One transport's queue and the requests it has open: shared by the parts below. */
type Lane = {
  url: string;
  rpc: ReturnType<typeof getHttpRpcClient>;
  maxInFlight: number;
  maxWaitMs: number;
  maxBatchSize: number;
  onBatchRefused: ((reason: string) => void) | undefined;
  queue: Waiting[];
  inFlight: number;
  /** Cleared for good once the node refuses a batch. */
  batching: boolean;
  nextId: number;
  /** Armed while calls wait behind an open request: opens another one once the first has waited long enough. */
  waitTimer: ReturnType<typeof setTimeout> | undefined;
};

function settle(lane: Lane, call: Waiting, answer: RpcAnswer): void {
  if (answer.error !== undefined && answer.error !== null) {
    call.reject(new RpcRequestError({ body: call.body, error: answer.error as never, url: lane.url }));
  } else {
    call.resolve(answer.result);
  }
}

async function sendOne(lane: Lane, call: Waiting, signal?: AbortSignal): Promise<void> {
  try {
    const answer = await lane.rpc.request({
      body: { ...call.body, id: lane.nextId++ } as never,
      ...(signal === undefined ? {} : { fetchOptions: { signal } }),
    });
    settle(lane, call, answer as RpcAnswer);
  } catch (error) {
    call.reject(error);
  }
}

/** The node refused a batch: its calls go again one by one, and no batch goes afterwards. */
function refused(lane: Lane, calls: Waiting[], reason: string): Promise<void> {
  if (lane.batching) {
    lane.batching = false;
    lane.onBatchRefused?.(reason);
  }
  return Promise.all(calls.map((call) => sendOne(lane, call))).then(() => undefined);
}

async function sendBatch(lane: Lane, calls: Waiting[]): Promise<void> {
  const ids = calls.map(() => lane.nextId++);
  let answers: unknown;
  try {
    answers = await lane.rpc.request({
      body: calls.map((call, i) => ({ ...call.body, id: ids[i] })) as never,
    });
  } catch (error) {
    const status = (error as { status?: number }).status;
    if (refusesBatch(status)) return refused(lane, calls, `HTTP ${status} to a batch of ${calls.length}`);
    for (const call of calls) call.reject(error);
    return;
  }
  return settleBatch(lane, calls, ids, answers);
}

/** Answers each call of a batch from the node's answer with its id (or refuses the batch, see below). */
function settleBatch(
  lane: Lane,
  calls: Waiting[],
  ids: number[],
  answers: unknown,
): Promise<void> | undefined {
  const byId = new Map<unknown, RpcAnswer>();
  for (const answer of Array.isArray(answers) ? (answers as unknown[]) : []) {
    if (answer !== null && typeof answer === "object") byId.set((answer as RpcAnswer).id, answer);
  }
  // A node that refuses the batch as a whole answers one error (bare, or alone in an array), which
  // viem's client hands back once per call: no answer then carries one of this batch's ids.
  if (!ids.some((id) => byId.has(id))) {
    const said = JSON.stringify(Array.isArray(answers) ? answers[0] : answers) ?? "nothing";
    return refused(lane, calls, `a batch of ${calls.length} was answered with ${said.slice(0, 200)}`);
  }
  for (const [i, call] of calls.entries()) {
    settle(
      lane,
      call,
      byId.get(ids[i]) ?? {
        error: { code: -32603, message: "the node's batch answer has no entry for this call" },
      },
    );
  }
  return undefined;
}

/** Opens one request with the calls at the head of the queue (a batch of them while batching). */
function send(lane: Lane): void {
  const calls = lane.queue.splice(0, lane.batching ? lane.maxBatchSize : 1);
  lane.inFlight++;
  const sent = calls.length === 1 ? sendOne(lane, calls[0]!) : sendBatch(lane, calls);
  void sent.finally(() => {
    lane.inFlight--;
    pump(lane);
  });
}

/** Sends what waits: at once when no request is open, else once the oldest call has waited `maxWaitMs`. */
function pump(lane: Lane): void {
  while (lane.queue.length > 0 && lane.inFlight < lane.maxInFlight) {
    const waited = performance.now() - lane.queue[0]!.since;
    if (lane.inFlight > 0 && waited < lane.maxWaitMs) {
      if (lane.waitTimer === undefined) {
        lane.waitTimer = setTimeout(() => {
          lane.waitTimer = undefined;
          pump(lane);
        }, lane.maxWaitMs - waited);
        // A call waiting here keeps nothing alive that its own request does not.
        lane.waitTimer.unref?.();
      }
      return;
    }
    send(lane);
  }
}

/** The transport's request: unbatched methods and calls with a signal go at once, the rest queue. */
function laneRequest(lane: Lane): EIP1193RequestFn {
  return (async ({ method, params }, requestOptions) => {
    const body = params === undefined ? { method } : { method, params };
    return new Promise<unknown>((resolve, reject) => {
      const call: Waiting = { body, since: performance.now(), resolve, reject };
      const signal = requestOptions?.signal;
      if (UNBATCHED_METHODS.has(method) || signal !== undefined) {
        void sendOne(lane, call, signal);
        return;
      }
      lane.queue.push(call);
      pump(lane);
    });
  }) as EIP1193RequestFn;
}

/**
 * An HTTP JSON-RPC transport that batches only what waits (see the top of this file).
 *
 * @example
 * const client = createPublicClient({ chain, transport: batchingHttp("http://127.0.0.1:8545") });
 */
export function batchingHttp(url: string | undefined, options: BatchingHttpOptions = {}): HttpTransport {
  const maxInFlight = Math.max(1, options.maxInFlight ?? 4);
  const maxWaitMs = Math.max(0, options.maxWaitMs ?? 50);
  const maxBatchSize = Math.max(1, options.maxBatchSize ?? 100);
  return ({ chain, retryCount: clientRetryCount, timeout: clientTimeout }) => {
    const url_ = url ?? chain?.rpcUrls.default.http[0];
    if (url_ === undefined) throw new UrlRequiredError();
    const timeout = clientTimeout ?? options.timeout ?? 10_000;
    const lane: Lane = {
      url: url_,
      rpc: getHttpRpcClient(url_, { fetchFn: options.fetchFn, timeout }),
      maxInFlight,
      maxWaitMs,
      maxBatchSize,
      onBatchRefused: options.onBatchRefused,
      queue: [],
      inFlight: 0,
      batching: maxBatchSize > 1,
      nextId: 1,
      waitTimer: undefined,
    };
    return createTransport(
      {
        key: "http",
        name: "HTTP JSON-RPC",
        type: "http",
        retryCount: options.retryCount ?? clientRetryCount ?? 1,
        timeout,
        request: laneRequest(lane),
      },
      { fetchOptions: undefined, url: url_ },
    );
  };
}
