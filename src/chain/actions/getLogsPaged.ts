/**
 * Log queries the way RPC providers answer them: each provider caps an `eth_getLogs` range (a few
 * hundred to 10 000 blocks, or a number of results) and refuses a wider one with an error. These read a
 * range in pages of at most `maxRange` blocks, halving the page and asking again when a provider refuses
 * one as too large.
 */
import {
  type AbiEvent,
  BaseError,
  type GetLogsParameters,
  type GetLogsReturnType,
  HttpRequestError,
  type PublicClient,
  RpcRequestError,
} from "viem";

/** Blocks per `eth_getLogs` call unless told otherwise: under every major provider's cap. */
export const DEFAULT_LOGS_RANGE = 2_000n;

export type LogRange = {
  fromBlock: bigint;
  /** The last block read (inclusive); the head when absent. */
  toBlock?: bigint | undefined;
  /** Most blocks one query spans (default 2 000); halved while the provider refuses a range as too large. */
  maxRange?: bigint | number | undefined;
  /**
   * `"newest-first"` reads the newest page first and stops at the first page with logs: for finding one
   * event known to have happened (an open, a deduction) without reading all of history.
   */
  order?: "oldest-first" | "newest-first" | undefined;
};

const RANGE_WORDS =
  /block range|range (is )?too (large|wide|big)|too many (blocks|results|logs)|more than [\d,]+ (results|logs|blocks)|response size|(max|maximum) (block )?range|range limit|limited to an? [\d,]+ (block )?range/i;

/** Whether `error` is a provider refusing a log query for its size (as opposed to being unreachable). */
export function isLogRangeRefusal(error: unknown): boolean {
  if (!(error instanceof BaseError)) return false;
  const http = error.walk((e) => e instanceof HttpRequestError) as HttpRequestError | null;
  if (http?.status === 413) return true;
  const rpc = error.walk((e) => e instanceof RpcRequestError) as RpcRequestError | null;
  if (rpc?.code === -32005) return true;
  if (http !== null && http.status !== undefined && http.status !== 400) return false;
  const text = [error.shortMessage, error.details, error.message].join(" ");
  return RANGE_WORDS.test(text);
}

/**
 * Reads `[fromBlock, toBlock]` through `read`, one page of at most `maxRange` blocks at a time, and
 * returns every page's items in block order (or, `"newest-first"`, the first non-empty page's).
 */
export async function pageLogRanges<T>(
  client: Pick<PublicClient, "getBlockNumber">,
  range: LogRange,
  read: (fromBlock: bigint, toBlock: bigint) => Promise<T[]>,
): Promise<T[]> {
  const last = range.toBlock ?? (await client.getBlockNumber({ cacheTime: 0 }));
  let span = BigInt(range.maxRange ?? DEFAULT_LOGS_RANGE);
  if (span < 1n) span = 1n;
  const newestFirst = range.order === "newest-first";
  const items: T[] = [];
  // `low..high` is what remains to be read.
  let low = range.fromBlock;
  let high = last;
  while (low <= high) {
    const from = newestFirst ? (high - span + 1n > low ? high - span + 1n : low) : low;
    const to = newestFirst ? high : low + span - 1n < high ? low + span - 1n : high;
    let page: T[];
    try {
      page = await read(from, to);
    } catch (error) {
      if (span === 1n || !isLogRangeRefusal(error)) throw error;
      span = span / 2n;
      continue;
    }
    if (newestFirst) {
      if (page.length > 0) return page;
      high = from - 1n;
    } else {
      items.push(...page);
      low = to + 1n;
    }
  }
  return items;
}

export type GetLogsPagedParameters<abiEvent extends AbiEvent | undefined = undefined> = Omit<
  GetLogsParameters<abiEvent>,
  "fromBlock" | "toBlock" | "blockHash"
> &
  LogRange;

/** `eth_getLogs` over a range of any width, in pages a provider accepts (see `pageLogRanges`). */
export function getLogsPaged<const abiEvent extends AbiEvent | undefined = undefined>(
  client: Pick<PublicClient, "getLogs" | "getBlockNumber">,
  { fromBlock, toBlock, maxRange, order, ...filter }: GetLogsPagedParameters<abiEvent>,
): Promise<GetLogsReturnType<abiEvent>> {
  return pageLogRanges(client, { fromBlock, toBlock, maxRange, order }, (from, to) =>
    // viem's overloads cannot follow a generic filter through a spread; the filter is getLogs' own.
    (client.getLogs as (p: object) => Promise<unknown[]>)({ ...filter, fromBlock: from, toBlock: to }),
  ) as Promise<GetLogsReturnType<abiEvent>>;
}
