/**
 * The gate's `pass` result with the headers it adds to the handler's response held as name/value
 * pairs. A web `Headers` costs an allocation, a validation of every value on `set` and a sort on
 * iteration; a paid request adds one or two headers that the adapter copies once onto the response,
 * so the `Headers` is built only when someone reads `headers` (a host calling the core directly), and
 * adapters copy the pairs with `eachGateHeader` instead.
 *
 * Invariant: `headers` and `eachGateHeader` show the same headers. Once `headers` has been read the
 * `Headers` object is the one truth (a host may have changed it), and `eachGateHeader` iterates it.
 */
import type { ServedSubscription } from "../schemes/types.ts";

/** Header name and value pairs, names as the protocol spells them. */
export type HeaderPairs = readonly (readonly [name: string, value: string])[];

const NO_HEADERS: HeaderPairs = [];
const nothingToComplete = async (): Promise<void> => undefined;

/** A `pass` whose `headers` are built on first read. Structurally a `GateResult` of kind `pass`. */
export class GatePass<Paid = never> {
  readonly kind = "pass" as const;
  paid: Paid | undefined;
  subscription: ServedSubscription | undefined;
  /** Told the handler's status (see `CompleteRequest`); by default nothing is done. */
  complete: (status: number) => Promise<void>;
  #pairs: HeaderPairs;
  #headers: Headers | undefined;

  constructor(
    pairs: HeaderPairs = NO_HEADERS,
    paid?: Paid,
    subscription?: ServedSubscription,
    complete: (status: number) => Promise<void> = nothingToComplete,
  ) {
    this.#pairs = pairs;
    this.paid = paid;
    this.subscription = subscription;
    this.complete = complete;
  }

  get headers(): Headers {
    if (this.#headers === undefined) {
      const headers = new Headers();
      for (const [name, value] of this.#pairs) headers.set(name, value);
      this.#headers = headers;
    }
    return this.#headers;
  }

  /** Each header to add, from the pairs while `headers` was never read. */
  eachHeader(fn: (name: string, value: string) => void): void {
    if (this.#headers !== undefined) {
      for (const [name, value] of this.#headers) fn(name, value);
      return;
    }
    const pairs = this.#pairs;
    for (let i = 0; i < pairs.length; i++) {
      const pair = pairs[i] as HeaderPairs[number];
      fn(pair[0], pair[1]);
    }
  }
}

/** Calls `fn` for each header a `pass` adds to the response, without building a `Headers` for it. */
export function eachGateHeader(
  result: { headers: Headers },
  fn: (name: string, value: string) => void,
): void {
  if (result instanceof GatePass) result.eachHeader(fn);
  else for (const [name, value] of result.headers) fn(name, value);
}
