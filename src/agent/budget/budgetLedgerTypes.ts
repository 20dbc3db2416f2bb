/**
 * The budget ledger's public types and input schemas (docs/budgets.md): what `createBudgetLedger`
 * takes and returns, apart from the parts that implement it, so those parts can name them.
 */
import type { Address } from "viem";
import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import {
  type AgentId,
  type BudgetLimits,
  type BudgetLimitsInput,
  type SpendKind,
  SpendKindSchema,
} from "./budgetLimits.ts";
import type { BudgetReport } from "./budgetReport.ts";

/** Long enough for a payment's round trips and retries, short enough that a crash frees budget soon. */
export const DEFAULT_RESERVATION_TTL_SECONDS = 900;
export const MAX_RESERVATION_TTL_SECONDS = 7 * 86_400;

/** One spend to reserve. `ref` is required for subscriptions: it names the subscription (or plan). */
export const ReserveRequestSchema = z
  .strictObject({
    amount: z.bigint().positive(),
    provider: AddressSchema,
    kind: SpendKindSchema,
    ref: z.string().min(1).max(512).optional(),
    /** How long the hold lasts (default: the ledger's `reservationTtlSeconds`). */
    ttlSeconds: z.int().positive().max(MAX_RESERVATION_TTL_SECONDS).optional(),
    /**
     * A subscription's standing hold placed right after this reservation under the same `ref`: the
     * approval hook is asked once, about `amount + withHold` (the whole commitment), and the next
     * `hold` of at most `withHold` under that ref, while this reservation lasts, is not asked again.
     */
    withHold: z.bigint().nonnegative().optional(),
    /**
     * The id of an open sale reservation this one draws from (a reseller's purchase for a sale it
     * admitted): the sale's shrinks by `amount` in the same transaction, so the total and daily limits
     * are not asked twice; per-provider and per-call still are. Not asked of the approval hook: the sale
     * was. Released or committed for less, the rest goes back to the sale while it is open.
     */
    within: z.string().min(1).max(128).optional(),
  })
  .refine((r) => r.kind !== "subscription" || r.ref !== undefined, {
    error: "a subscription spend needs a ref naming the subscription",
    path: ["ref"],
  })
  .refine((r) => r.withHold === undefined || r.kind === "subscription", {
    error: "only a subscription's first period comes with a standing hold",
    path: ["withHold"],
  });
export type ReserveRequest = z.input<typeof ReserveRequestSchema>;

/** A hold on an agent's budget, returned by `reserve`; pass it (or just `{ id }`) to commit or release. */
export type Reservation = {
  id: string;
  agent: AgentId;
  provider: Address;
  kind: SpendKind;
  ref: string | undefined;
  amount: bigint;
  reservedAt: Date;
  expiresAt: Date;
};

/** The final state of a reservation after `commit` or `release`. */
export type SpendOutcome = {
  id: string;
  status: "committed" | "released";
  reserved: bigint;
  /** What was recorded as spent (0 when released). */
  committed: bigint;
  /** Committed after the reservation had expired. */
  late: boolean;
};

/** A one-time payment whose outcome is unknown, held in the budget until read back (`pend`). */
export type PendingPayment = {
  /** The reservation that holds it. */
  spendId: string;
  agent: AgentId;
  /** The paying wallet: the one that can read the payment back. */
  payer: Address;
  /** The EIP-3009 authorization nonce (keccak256 of the memo). */
  nonce: `0x${string}`;
  /** Unix seconds: no transfer can use the authorization at or after this time. */
  validBefore: number;
  amount: bigint;
  createdAt: Date;
  /** The paid request's method and URL, when the payer said (its proof is kept for the next call). */
  target?: string | undefined;
  /**
   * A payment to a standard x402 server: the authorization's token. Read back from the chain (its
   * EIP-3009 `authorizationState`), since the seller's facilitator settles it, not Tollgate's.
   */
  token?: Address | undefined;
};

/** What the approval hook is asked about. */
export type ApprovalRequest = {
  agent: AgentId;
  amount: bigint;
  provider: Address;
  kind: SpendKind;
  ref: string | undefined;
  /**
   * The part of `amount` that is a standing hold asked about with a subscription's first period
   * (`reserve(…, { withHold })`): `amount` is the whole commitment, first period plus hold.
   */
  hold?: bigint | undefined;
};

export type BudgetApproval = {
  /** Spends strictly above this amount need the hook's approval. */
  threshold: bigint;
  /** Resolves true to allow the spend. A rejection counts as a denial. */
  hook: (request: ApprovalRequest) => Promise<boolean>;
};

/** The narrow logger the ledger writes to; a pino logger satisfies it. */
export type LedgerLogger = {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
};

export type BudgetLedgerOptions = {
  store: Store;
  clock: Clock;
  approval?: BudgetApproval | undefined;
  /** Default lifetime of a reservation in seconds (900). */
  reservationTtlSeconds?: number | undefined;
  logger?: LedgerLogger | undefined;
  /** Source of reservation ids (default: random UUIDs). */
  createId?: (() => string) | undefined;
};

/** A standing hold to place or grow: what a subscription may still pull on chain. */
export const HoldRequestSchema = z.strictObject({
  ref: z.string().min(1).max(512),
  provider: AddressSchema,
  /** 0 only opens the ref's hold (so later charges know their provider). */
  amount: z.bigint().nonnegative(),
});
export type HoldRequest = z.input<typeof HoldRequestSchema>;

/**
 * Money that moved under a standing hold: `amount` more, or everything charged under `ref` now being
 * `total` (only what exceeds the ref's `charged` so far is new, so a watcher may repeat itself).
 */
export const ChargeRequestSchema = z.union([
  z.strictObject({ ref: z.string().min(1).max(512), kind: SpendKindSchema, amount: z.bigint().positive() }),
  z.strictObject({ ref: z.string().min(1).max(512), kind: SpendKindSchema, total: z.bigint().nonnegative() }),
]);
export type ChargeRequest = z.input<typeof ChargeRequestSchema>;

/** What a charge recorded: `amount` spent, of which `beyondHold` was not covered by the hold. */
export type ChargeOutcome = {
  ref: string;
  amount: bigint;
  beyondHold: bigint;
  held: bigint;
  charged: bigint;
};

export type BudgetLedger = {
  /** The store the ledger writes to (the agent's subscriptions are kept beside it). */
  readonly store: Store;
  /** Replaces the agent's limits (creating the agent's budget if new); returns them normalized. */
  setLimits(agent: string, limits: BudgetLimitsInput): Promise<BudgetLimits>;
  /** The agent's limits, or `undefined` when no budget was ever set for it. */
  getLimits(agent: string): Promise<BudgetLimits | undefined>;
  /**
   * Holds `amount` of the agent's budget if every limit allows it. Throws `BudgetExceeded` (details
   * name the limit) when one does not, or when the agent has no budget; `ApprovalDenied` when the
   * spend is above the approval threshold and the hook says no.
   */
  reserve(agent: string, request: ReserveRequest): Promise<Reservation>;
  /**
   * Records the spend: `actualAmount` (default: the reserved amount, at most it); the rest is freed.
   * Idempotent: committing again returns the same outcome. Committing a released reservation throws.
   */
  commit(reservation: { id: string }, actualAmount?: bigint): Promise<SpendOutcome>;
  /** Frees the hold. Idempotent; releasing a committed reservation changes nothing and returns it. */
  release(reservation: { id: string }): Promise<SpendOutcome>;
  /**
   * Marks a reservation as a payment whose outcome is unknown (its `/authorize` answer was lost): it
   * keeps holding its amount past its expiry (up to 7 days) until `commit` (the payment settled) or
   * `release` (it never did, known only after `validBefore`), which also forget it. Idempotent.
   */
  pend(
    reservation: { id: string },
    payment: {
      payer: Address;
      nonce: `0x${string}`;
      validBefore: number;
      target?: string | undefined;
      /** Set for an x402 payment: the authorization's token, read back on chain (`PendingPayment.token`). */
      token?: Address | undefined;
    },
  ): Promise<void>;
  /** The agent's payments whose outcome is unknown, oldest first. */
  pendingPayments(agent: string): Promise<PendingPayment[]>;
  /**
   * What the agent's open sale reservation `id` still holds for the purchases drawn from it
   * (`reserve(…, { within: id })`); 0 once it is closed or expired, or if it is not the agent's.
   */
  saleHeld(agent: string, id: string): Promise<bigint>;
  /** Marks a subscription ended, so its period price no longer counts as committed. False if not active. */
  endSubscription(agent: string, ref: string): Promise<boolean>;
  /** Spent, reserved and remaining per limit, per provider and per kind. Throws `NotFound` without a budget. */
  report(agent: string): Promise<BudgetReport>;
  /**
   * Places (or grows) a standing hold: `amount` more that the subscription `ref` may pull on chain.
   * Checked like a reservation against the per-provider, daily and total limits (not per call), and the
   * approval hook; unlike one it never expires. Throws `BudgetExceeded` / `ApprovalDenied`.
   */
  hold(agent: string, request: HoldRequest): Promise<bigint>;
  /**
   * Records money a subscription moved (a renewal, an overage deduction) as spent, taking it from the
   * ref's hold. Never refused, since the money already moved: what the hold did not cover is returned as
   * `beyondHold` (a seller took more than was reserved) and is spent all the same.
   */
  charge(agent: string, request: ChargeRequest): Promise<ChargeOutcome>;
  /** Ends a standing hold (the subscription ended): what was left stops counting. Returns it. */
  releaseHold(agent: string, ref: string): Promise<bigint>;
  /** The ref's standing hold and what was charged under it, or undefined if it never had one. */
  getHold(
    agent: string,
    ref: string,
  ): Promise<{ provider: Address; held: bigint; charged: bigint } | undefined>;
};
