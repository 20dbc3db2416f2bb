/**
 * Sale admission (docs/budgets.md, "Resellers spend inside the sale"): a specialist that buys from suppliers to serve a call
 * reserves, in its own budget, what serving the call may cost them BEFORE the gate honours the buyer's
 * payment. The reservation is made when the gate answers the 402 (kept for that 402's memo, so the
 * proof that comes back finds it) or, for a request that carries no memo of ours, when it arrives;
 * each supplier purchase then reserves within it (`within`, src/agent/budget/createBudgetLedger.ts),
 * and it is released once the call is answered — unless the handler failed after being paid (5xx, the
 * gate gives the proof back): then it is kept for that proof's memo, so the buyer's re-sent proof finds
 * its sale admitted, with what its purchases already drew. A sale the budget cannot reserve for is
 * refused with `SaleNotAdmitted` (503) instead of a 402: the buyer pays nothing.
 *
 * Invariant: the gate runs a paid request of an admissible capability only while a sale reservation
 * for it is held, so every supplier purchase the sale's allowance permits fits the budget.
 */
import type { MiddlewareHandler } from "hono";
import { type Address, getAddress } from "viem";
import { z } from "zod";
import { formatUnitsExact } from "../protocol/amount.ts";
import type { Clock } from "../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../protocol/errors.ts";
import { HeaderName, safeDecodeJsonHeader } from "../protocol/header.ts";
import type { BudgetLedger } from "./budget/createBudgetLedger.ts";
import type { CapabilityContext } from "./tools/capability.ts";

/** One admitted sale: its reservation in the reseller's budget, released by `close`. */
export type SaleTicket = {
  /** The sale's reservation not set aside for a supplier (under the zero address). */
  readonly reservation: { id: string };
  /** The part reserved for each planned supplier, by its lowercase address (`purchases`). */
  readonly bySupplier?: Readonly<Record<string, string>> | undefined;
  readonly amount: bigint;
  /** Releases what the sale's purchases did not draw. Idempotent; never rejects. */
  close(): Promise<void>;
};

/**
 * Reserves one sale's supplier spend, or throws `SaleNotAdmitted`. `paid`: the request already carries
 * a payment (a proof, an x402 payload, a subscription credential), which a refusal leaves unused.
 */
export type SaleAdmission = { admit(request?: { paid?: boolean | undefined }): Promise<SaleTicket> };

/** A capability that admits its sales (createSpecialist calls `admission` before the gate). */
export type Admissible = { admission: SaleAdmission };

export function admissionOf(capability: object): SaleAdmission | undefined {
  const admission = (capability as Partial<Admissible>).admission;
  return typeof admission?.admit === "function" ? admission : undefined;
}

/** When a refused sale may be asked again (`Retry-After`, and `retryAfter` over MCP). */
const SALE_RETRY_AFTER_SECONDS = 5;

/** Sale reservations are held under the zero address: no supplier is known until one is bought. */
const SALE_PROVIDER = getAddress("0x0000000000000000000000000000000000000000");

/**
 * What one sale pays one supplier. For a supply served under a subscription the reseller holds across
 * its sales, `amount` is what one call costs beyond the subscription's period (the overage of the
 * units it draws; 0 for a plan without overage), and `heldBy` names the subscription's standing hold:
 * while that hold (reserved when the reseller subscribed, against every limit) has room for `amount`
 * beside the other open sales counting on it, the sale's part is 0 — the call is paid from the hold —
 * else `amount` is reserved under the supplier like any part, so its per-provider and per-call limits
 * are met before the buyer pays.
 */
export type SalePurchase = {
  provider: Address;
  amount: bigint;
  /** The ref of the standing hold of the subscription serving this supply, while one is held. */
  heldBy?: (() => Promise<string | undefined>) | undefined;
};

export type BudgetAdmissionOptions = {
  budget: BudgetLedger;
  agent: string;
  /** What one sale may cost its suppliers (its call allowance: what the buyer pays), smallest units. */
  amount: bigint;
  /**
   * What one sale pays each supplier it buys from, by the supplier's identity (what its per-provider
   * limit is keyed by: the listing's seller), one entry per supplier, at most `amount` in all. Each is
   * reserved under its supplier, so the per-provider and per-call limits are met when the sale is
   * admitted, not refused once the buyer paid; the rest of `amount` is reserved under the zero address
   * (a retry's slack). Without it, the sale is reserved against the total and daily limits only.
   * A supply served under a subscription the reseller holds across its sales names it (`heldBy`).
   */
  purchases?: readonly SalePurchase[] | undefined;
  /**
   * Budget kept free beside admitted sales, for the subscriptions the reseller takes across sales
   * (their period and standing hold are its own spend, not a sale's). Default 0.
   */
  keepFree?: bigint | undefined;
  /** How long a reservation lasts if never closed (a crash): default 300 s. */
  ttlSeconds?: number | undefined;
  logger?: { info(obj: object, msg: string): void } | undefined;
};

/**
 * What one budget admission keeps across its sales: the sales counted (for their refs) and what open
 * sales count on each subscription hold (by ref), paid from it instead of a part.
 */
type BudgetAdmissionState = {
  options: BudgetAdmissionOptions;
  purchases: readonly SalePurchase[];
  sales: number;
  onHolds: Map<string, bigint>;
};

/** Refuses purchases that are not positive, one per supplier, and at most what the sale earns in all. */
function checkPurchases(options: BudgetAdmissionOptions, purchases: readonly SalePurchase[]): void {
  const { agent, amount } = options;
  const planned = purchases.reduce((sum, p) => sum + p.amount, 0n);
  const suppliers = new Set(purchases.map((p) => p.provider.toLowerCase()));
  if (
    planned > amount ||
    suppliers.size < purchases.length ||
    purchases.some((p) => p.amount < 0n || (p.amount === 0n && p.heldBy === undefined))
  ) {
    throw new TollgateError(
      "InvalidRequest",
      "a sale's purchases are positive, one per supplier, and at most what the sale earns in all",
      { details: { agent, amount: amount.toString(), planned: planned.toString() } },
    );
  }
}

/** Each purchase's part for this sale: 0 for a subscribed supply whose hold has room (counted on it). */
async function partsNow(
  state: BudgetAdmissionState,
): Promise<{ parts: SalePurchase[]; counted: [string, bigint][] }> {
  const { purchases, onHolds } = state;
  const subscribed = purchases.filter((p) => p.heldBy !== undefined);
  if (subscribed.length === 0) return { parts: [...purchases], counted: [] };
  const refs = await Promise.all(purchases.map((p) => p.heldBy?.().catch(() => undefined)));
  const holds = (await state.options.budget.report(state.options.agent)).subscriptions.holds;
  // No await from here on: the room read and what this sale counts on it are one step.
  const parts: SalePurchase[] = [];
  const counted: [string, bigint][] = [];
  purchases.forEach((p, i) => {
    const ref = refs[i];
    const held = ref === undefined ? undefined : holds.find((h) => h.ref === ref)?.held;
    if (ref !== undefined && held !== undefined && held - (onHolds.get(ref) ?? 0n) >= p.amount) {
      onHolds.set(ref, (onHolds.get(ref) ?? 0n) + p.amount);
      counted.push([ref, p.amount]);
    } else if (p.amount > 0n) {
      parts.push(p);
    }
  });
  return { parts, counted };
}

/** Refused before the gate: a payment presented was neither settled nor marked used. */
function saleRefused(
  options: BudgetAdmissionOptions,
  request: { paid?: boolean | undefined } | undefined,
  why: string,
  cause?: unknown,
): TollgateError {
  const { agent, amount } = options;
  return new TollgateError(
    "SaleNotAdmitted",
    request?.paid === true
      ? `${agent} cannot take this sale now: ${why}; the payment sent with this request was not used: send the same proof again later`
      : `${agent} cannot take this sale now: ${why}; nothing was charged, try again later`,
    {
      details: { agent, requested: amount.toString(), paymentUsed: false },
      retryAfter: SALE_RETRY_AFTER_SECONDS,
      ...(cause === undefined ? {} : { cause }),
    },
  );
}

/** One sale's reservations: those held so far, and its close, which gives back its hold counts and releases them. */
type SaleHolds = { held: { id: string }[]; bySupplier: Record<string, string>; close: () => Promise<void> };

function saleHolds(state: BudgetAdmissionState, counted: [string, bigint][]): SaleHolds {
  const held: { id: string }[] = [];
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    for (const [ref, part] of counted) state.onHolds.set(ref, (state.onHolds.get(ref) ?? 0n) - part);
    for (const r of held) await state.options.budget.release(r).catch(() => undefined);
  };
  return { held, bySupplier: {}, close };
}

/** Reserves one part of the sale; a budget refusal closes the sale and becomes `SaleNotAdmitted`. */
async function reservePart(
  state: BudgetAdmissionState,
  sale: {
    ref: string;
    ttlSeconds: number;
    holds: SaleHolds;
    request: { paid?: boolean | undefined } | undefined;
  },
  part: { provider: Address; amount: bigint },
): Promise<void> {
  const { options } = state;
  const { budget, agent, amount } = options;
  try {
    const r = await budget.reserve(agent, {
      amount: part.amount,
      provider: part.provider,
      kind: "one-time",
      ref: sale.ref,
      ttlSeconds: sale.ttlSeconds,
    });
    sale.holds.held.push({ id: r.id });
    if (part.provider !== SALE_PROVIDER) sale.holds.bySupplier[part.provider.toLowerCase()] = r.id;
  } catch (error) {
    await sale.holds.close();
    if (isTollgateError(error, "BudgetExceeded") || isTollgateError(error, "ApprovalDenied")) {
      options.logger?.info({ agent, code: error.code }, "sale not admitted");
      const limit = (error.details as { limit?: unknown } | undefined)?.limit;
      throw saleRefused(
        options,
        sale.request,
        part.provider === SALE_PROVIDER || (limit !== "perProvider" && limit !== "perCall")
          ? `its budget cannot reserve ${formatUnitsExact(amount)} USDC for its suppliers`
          : `its ${String(limit)} limit cannot take the ${formatUnitsExact(part.amount)} USDC a sale pays ${part.provider}`,
        error,
      );
    }
    throw error;
  }
}

/** Admits one sale: reserves its slack and its suppliers' parts, then checks what the budget keeps free. */
async function admitBudgetSale(
  state: BudgetAdmissionState,
  request: { paid?: boolean | undefined } | undefined,
): Promise<SaleTicket> {
  const { options } = state;
  const { budget, agent, amount } = options;
  const keepFree = options.keepFree ?? 0n;
  const ref = `sale:${++state.sales}`;
  const ttlSeconds = options.ttlSeconds ?? 300;
  const { parts: reserved, counted } = await partsNow(state);
  const holds = saleHolds(state, counted);
  // The slack first, then each supplier's part: any refusal releases what was reserved. What a
  // subscription's hold pays for is part of the slack: the sale still reserves all it may cost.
  const partsTotal = reserved.reduce((sum, p) => sum + p.amount, 0n);
  const parts = [
    ...(amount > partsTotal ? [{ provider: SALE_PROVIDER, amount: amount - partsTotal }] : []),
    ...reserved,
  ];
  for (const part of parts) await reservePart(state, { ref, ttlSeconds, holds, request }, part);
  if (keepFree > 0n) {
    const report = await budget.report(agent);
    const left = [report.remaining.total, report.remaining.daily].filter((r) => r !== undefined);
    if (left.some((r) => r < keepFree)) {
      await holds.close();
      throw saleRefused(
        options,
        request,
        `its budget keeps ${formatUnitsExact(keepFree)} USDC free for its subscriptions`,
      );
    }
  }
  const { bySupplier } = holds;
  return {
    // Purchases not planned for draw from the slack, or (all planned) from the first part.
    reservation: holds.held[0]!,
    ...(Object.keys(bySupplier).length === 0 ? {} : { bySupplier }),
    amount,
    close: holds.close,
  };
}

/**
 * Admission against the reseller's budget ledger.
 * @example
 * const admission = createBudgetAdmission({ budget, agent: "reseller", amount: 80_000n });
 */
export function createBudgetAdmission(options: BudgetAdmissionOptions): SaleAdmission {
  const purchases = options.purchases ?? [];
  checkPurchases(options, purchases);
  const state: BudgetAdmissionState = { options, purchases, sales: 0, onHolds: new Map() };
  return { admit: (request) => admitBudgetSale(state, request) };
}

/** The sale a handler serves, with the reservation that funds its purchases. */
export function fundedSale(
  sale: CapabilityContext["sale"],
  ticket: SaleTicket | undefined,
): CapabilityContext["sale"] {
  if (sale === undefined || ticket === undefined) return sale;
  const funded: CapabilityContext["sale"] & { funding: SaleFunding } = {
    ...sale,
    funding: {
      id: ticket.reservation.id,
      ...(ticket.bySupplier === undefined ? {} : { bySupplier: ticket.bySupplier }),
    },
  };
  return funded;
}

/** The reservations funding a sale's purchases: its slack, and the part set aside for each supplier. */
export type SaleFunding = { id: string; bySupplier?: Readonly<Record<string, string>> | undefined };

/** The reservation funding `sale`'s purchases, when its capability admitted it. */
export function saleFundingOf(sale: CapabilityContext["sale"]): SaleFunding | undefined {
  const funding = (sale as { funding?: { id?: unknown; bySupplier?: unknown } } | undefined)?.funding;
  if (typeof funding?.id !== "string") return undefined;
  const bySupplier = funding.bySupplier;
  return typeof bySupplier === "object" && bySupplier !== null
    ? { id: funding.id, bySupplier: bySupplier as Record<string, string> }
    : { id: funding.id };
}

/** Offers (402s) whose sale is reserved, by memo, until their buyer pays or they lapse. */
export type OfferBook = {
  keep(memos: readonly string[], ticket: SaleTicket): void;
  take(memo: string): SaleTicket | undefined;
  size(): number;
  /** Resolves once the reservations of offers found lapsed so far are released. */
  released(): Promise<void>;
};

/** Open offers at most: past it, new 402s are refused (`SaleNotAdmitted`) rather than reserved. */
export const MAX_OPEN_OFFERS = 512;

export function createOfferBook(clock: Clock, ttlMs: number): OfferBook {
  const offers = new Map<string, { ticket: SaleTicket; until: number }>();
  /** Releases of lapsed offers under way: a sale admitted next waits for them (`released`). */
  const releasing = new Set<Promise<void>>();
  const prune = () => {
    const at = clock.now();
    for (const [memo, offer] of offers) {
      if (offer.until > at) continue;
      offers.delete(memo);
      const release = offer.ticket.close().finally(() => releasing.delete(release));
      releasing.add(release);
    }
  };
  return {
    keep(memos, ticket) {
      prune();
      const until = clock.now() + ttlMs;
      for (const memo of memos) offers.set(memo, { ticket, until });
    },
    take(memo) {
      prune();
      const offer = offers.get(memo);
      if (offer === undefined) return undefined;
      // One ticket may be kept under several memos (one per payment option): all go together.
      for (const [key, o] of offers) if (o.ticket === offer.ticket) offers.delete(key);
      return offer.ticket;
    },
    size: () => {
      prune();
      return new Set([...offers.values()].map((o) => o.ticket)).size;
    },
    async released() {
      prune();
      await Promise.all([...releasing]);
    },
  };
}

const MemoCarrierSchema = z.object({ memo: z.string().min(1).max(2048) });
const PaymentRequiredMemosSchema = z.object({
  accepts: z.array(z.object({ memo: z.string().min(1).max(2048).optional() })).max(16),
});

/** How long a sale stays reserved for an offer (a 402) or a failed paid request's re-sent proof. */
export const OFFER_TTL_MS = 120_000;

/** The memo a Tollgate proof (`X-PAYMENT`, `_meta["tollgate/payment"]`) names, if it is readable. */
export function memoOfProof(proof: string | undefined): string | undefined {
  if (proof === undefined) return undefined;
  const carrier = safeDecodeJsonHeader(proof, MemoCarrierSchema);
  return carrier.ok ? carrier.value.memo : undefined;
}

/** The memos a 402 body (Tollgate's, docs/protocol.md, "402 body") offers, to keep its sale's reservation under. */
export function memosOfPaymentRequired(body: unknown): string[] {
  const parsed = PaymentRequiredMemosSchema.safeParse(body);
  return parsed.success ? parsed.data.accepts.flatMap((a) => (a.memo === undefined ? [] : [a.memo])) : [];
}

/** One request to an admissible capability, as any transport (HTTP, MCP) reads it. */
export type SaleRequest = {
  /** It carries a payment: a proof, an x402 payload or a subscription credential. */
  paid: boolean;
  /** The memo its proof names (a payment for one of our 402s), if any. */
  memo?: string | undefined;
};

/** A request's admitted sale, and how it ends once the request is answered. */
export type AdmittedSale = {
  ticket: SaleTicket;
  /**
   * Ends the request: a 402 (`offered`: the memos it names) keeps the sale for them; a paid request
   * answered 5xx (the gate gave the proof back) keeps it for its proof's memo; anything else
   * releases it. Never rejects.
   */
  answered(answer: { status: number; offered?: readonly string[] | undefined }): Promise<void>;
};

/**
 * Finds a request's sale (its 402's reservation, by the proof's memo) or admits one now. Runs before
 * the gate: refused (`SaleNotAdmitted`, thrown), the request never reaches it, so no proof is
 * consumed and no payment is settled.
 */
export async function admitSale(
  admission: SaleAdmission,
  offers: OfferBook,
  request: SaleRequest,
): Promise<AdmittedSale> {
  let ticket = request.memo === undefined ? undefined : offers.take(request.memo);
  if (ticket === undefined) {
    // What lapsed offers held is free again before this sale is weighed against the budget.
    await offers.released();
    if (!request.paid && offers.size() >= MAX_OPEN_OFFERS) {
      throw new TollgateError(
        "SaleNotAdmitted",
        "too many offers are open; nothing was charged, try again later",
        { retryAfter: SALE_RETRY_AFTER_SECONDS },
      );
    }
    ticket = await admission.admit({ paid: request.paid });
  }
  const admitted = ticket;
  let done = false;
  return {
    ticket: admitted,
    async answered({ status, offered }) {
      if (done) return;
      done = true;
      if (request.paid && status >= 500 && request.memo !== undefined) {
        // The handler failed after the gate took the payment, and the gate gave the proof back: the
        // buyer re-sends the same proof, which must find its sale still admitted (and what its
        // purchases drew from it), not meet a budget that other sales took meanwhile.
        offers.keep([request.memo], admitted);
      } else if (!request.paid && status === 402 && offered !== undefined && offered.length > 0) {
        offers.keep(offered, admitted);
      } else {
        await admitted.close();
      }
    },
  };
}

/** The body of a refusal, as a gate error is written. */
function refusal(error: TollgateError): Response {
  return new Response(JSON.stringify(error.toBody()), {
    status: error.status,
    headers: {
      "content-type": "application/json",
      "retry-after": String(error.retryAfter ?? SALE_RETRY_AFTER_SECONDS),
    },
  });
}

export type AdmissionMiddlewareOptions = {
  admission: SaleAdmission;
  offers: OfferBook;
  /** Where the handler finds its request's ticket. */
  tickets: WeakMap<Request, SaleTicket>;
};

/**
 * Runs before the payment gate on an admissible capability's route. A request without a payment is
 * admitted first (its 402 keeps the reservation for the memo it names, anything else releases it); a
 * paid request finds its 402's reservation by memo, or is admitted anew; refused, it never reaches the
 * gate, so no proof is consumed and no payment is settled. The reservation is released once answered,
 * or kept under the proof's memo when the paid request was answered 5xx (its proof comes back).
 */
export function admissionMiddleware(options: AdmissionMiddlewareOptions): MiddlewareHandler {
  const { admission, offers, tickets } = options;
  return async (c, next) => {
    const proof = c.req.header(HeaderName.Payment);
    const paid =
      proof !== undefined ||
      c.req.header(HeaderName.X402PaymentSignature) !== undefined ||
      c.req.header(HeaderName.Subscription) !== undefined ||
      c.req.header(HeaderName.SubscriptionAuth) !== undefined;
    let sale: AdmittedSale;
    try {
      sale = await admitSale(admission, offers, { paid, memo: memoOfProof(proof) });
    } catch (error) {
      if (isTollgateError(error, "SaleNotAdmitted")) return refusal(error);
      throw error;
    }
    tickets.set(c.req.raw, sale.ticket);
    // Not answered (next() threw): released, as nothing tells whether the proof came back.
    let answer: { status: number; offered?: string[] } = { status: 0 };
    try {
      await next();
      answer = { status: c.res.status };
      if (!paid && c.res.status === 402) {
        const body = await c.res
          .clone()
          .json()
          .catch(() => undefined);
        answer = { status: 402, offered: memosOfPaymentRequired(body) };
      }
    } finally {
      await sale.answered(answer);
    }
  };
}
