/**
 * The routes a payer learnt from 402s: which channel terms a route is sold on (to pay it up front), and a
 * route per terms (the seller's gate a cooperative close is asked of). Both bounded at 10 000.
 */
import type { ChannelBook } from "./channelBook.ts";
import { termsKey } from "./channelBook.ts";
import type { ChannelRecord } from "./channelWalletStore.ts";
import type { ChannelTermsInput } from "./channelWalletTypes.ts";

/** A route of the seller's gate, as a channel record keeps it for its cooperative close. */
export type CloseRoute = NonNullable<ChannelRecord["closeRoute"]>;

export type WalletRoutes = {
  /** Remembers that `method url` is sold on `terms`; gives channels on them without a close route this one. */
  learn(method: string, url: string, terms: ChannelTermsInput): void;
  /** The terms `method url` was last sold on, if known. */
  termsOf(method: string, url: string): ChannelTermsInput | undefined;
  /** A route sold on these terms, if one was learnt. */
  closeRouteOf(terms: ChannelTermsInput): CloseRoute | undefined;
  /** The terms a route on this channel's contract, payee and token was last sold on, if any is known. */
  knownTerms(r: ChannelRecord): ChannelTermsInput | undefined;
};

const withoutQuery = (url: string) => {
  const q = url.indexOf("?");
  return q < 0 ? url : url.slice(0, q);
};

export function createWalletRoutes(book: ChannelBook): WalletRoutes {
  /** Known routes (`METHOD origin/path`, no query) → the channel terms their 402 offered; bounded. */
  const routes = new Map<string, ChannelTermsInput>();
  /** Terms → a route sold on them (the gate a cooperative close is asked of); bounded like `routes`. */
  const routeOfTerms = new Map<string, CloseRoute>();
  const routeKey = (method: string, url: string) => `${method.toUpperCase()} ${withoutQuery(url)}`;

  function learn(method: string, url: string, terms: ChannelTermsInput) {
    if (routes.size >= 10_000) routes.clear();
    routes.set(routeKey(method, url), terms);
    const k = termsKey(terms);
    if (routeOfTerms.has(k)) return;
    if (routeOfTerms.size >= 10_000) routeOfTerms.clear();
    const route = { method: method.toUpperCase(), url: withoutQuery(url) };
    routeOfTerms.set(k, route);
    for (const entry of book.onTerms(terms)) {
      if (entry.record.closeRoute === undefined && entry.record.status !== "closed") {
        book.put(entry, { closeRoute: route });
      }
    }
  }

  function knownTerms(r: ChannelRecord): ChannelTermsInput | undefined {
    const k = termsKey(r);
    for (const t of routes.values()) if (termsKey(t) === k) return t;
    return undefined;
  }

  return {
    learn,
    termsOf: (method, url) => routes.get(routeKey(method, url)),
    closeRouteOf: (terms) => routeOfTerms.get(termsKey(terms)),
    knownTerms,
  };
}
