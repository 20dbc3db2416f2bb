/**
 * The persistent budget ledger (docs/budgets.md). A spend goes through three steps:
 * `reserve` (checks every limit and holds the amount) → the payment → `commit` (records what was
 * actually paid) or `release` (frees the hold when the payment did not happen).
 *
 * Concurrency: every read-check-write runs in one store transaction that first takes the agent's row
 * lock (`SELECT … FROM agent_budgets … FOR UPDATE`). Reservations of one agent are therefore
 * serialized, and each sees every reservation and commit that came before it, on PGlite (one
 * connection, transactions in turn) and on PostgreSQL (READ COMMITTED: each statement after the lock
 * sees the committed work of the transactions that held it before). Agents do not block each other.
 *
 * Expiry: a reservation holds budget until `expiresAt`, so a crashed agent frees its holds by itself.
 * Nothing has to sweep: an expired reservation simply stops counting.
 */
import { randomUUID } from "node:crypto";
import type { Address } from "viem";
import { getAddress } from "viem";
import { z } from "zod";
import { AddressSchema } from "../../protocol/address.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import type { Clock } from "../../protocol/clock.ts";
import { ErrorCode, TollgateError } from "../../protocol/errors.ts";
import { BigintColumnSchema, TimestampColumnSchema } from "../../store/columnSchemas.ts";
import { queryOneParsed, queryParsed } from "../../store/queryParsed.ts";
import type { Queryable, Store } from "../../store/store.ts";
import { budgetHeadroom, type Headroom } from "./budgetHeadroom.ts";
import {
  type AgentId,
  AgentIdSchema,
  type BudgetLimits,
  type BudgetLimitsInput,
  BudgetLimitsSchema,
  type SpendKind,
  SpendKindSchema,
} from "./budgetLimits.ts";
import { type BudgetReport, type BudgetUsage, buildBudgetReport } from "./budgetReport.ts";

/** Row schemas, built once (a zod object schema compiles its parser on first use). */
const AgentRowSchema = z.object({ agent: z.string() });
const ReservedRowSchema = z.object({ reserved: BigintColumnSchema });
const HeldRowSchema = z.object({ held: BigintColumnSchema });
const NonceSchema = z.string().regex(/^0x[0-9a-fA-F]{64}$/);

const DAY_MS = 86_400_000;
/** Long enough for a payment's round trips and retries, short enough that a crash frees budget soon. */
const DEFAULT_RESERVATION_TTL_SECONDS = 900;
const MAX_RESERVATION_TTL_SECONDS = 7 * 86_400;

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

const LimitsRowSchema = z.object({
  total_limit: BigintColumnSchema.nullable(),
  daily_limit: BigintColumnSchema.nullable(),
  per_call_limit: BigintColumnSchema.nullable(),
  max_subscription_commitment: BigintColumnSchema.nullable(),
});
const ProviderLimitRowSchema = z.object({ provider: z.string(), limit_amount: BigintColumnSchema });
const TallyRowSchema = z.object({ provider: z.string(), kind: SpendKindSchema, spent: BigintColumnSchema });
const OpenRowSchema = z.object({
  provider: z.string(),
  kind: SpendKindSchema,
  ref: z.string().nullable(),
  reserved: BigintColumnSchema,
  reserved_at: TimestampColumnSchema,
});
const SubscriptionRowSchema = z.object({ ref: z.string(), provider: z.string(), amount: BigintColumnSchema });
const HoldRowSchema = z.object({
  ref: z.string(),
  provider: z.string(),
  held: BigintColumnSchema,
  charged: BigintColumnSchema,
});
const SpendRowSchema = z.object({
  id: z.string(),
  agent: z.string(),
  provider: z.string(),
  kind: SpendKindSchema,
  ref: z.string().nullable(),
  reserved: BigintColumnSchema,
  committed: BigintColumnSchema.nullable(),
  status: z.enum(["reserved", "committed", "released"]),
  expires_at: TimestampColumnSchema,
  late: z.boolean(),
  parent_id: z.string().nullable(),
});
type SpendRow = z.infer<typeof SpendRowSchema>;
const PendingRowSchema = z.object({
  spend_id: z.string(),
  agent: z.string(),
  payer: z.string(),
  nonce: z.string(),
  valid_before: BigintColumnSchema,
  amount: BigintColumnSchema,
  created_at: TimestampColumnSchema,
  target: z.string().nullable(),
  token: z.string().nullable(),
});
/** How long a pending payment's reservation holds at most (the longest reservation). */
const PENDING_HOLD_MS = MAX_RESERVATION_TTL_SECONDS * 1000;

function usdc(amount: bigint): string {
  return `${formatUnitsExact(amount)} USDC`;
}

function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new TollgateError(ErrorCode.InvalidRequest, `invalid ${what}: ${parsed.error.issues[0]?.message}`, {
      details: { issues: parsed.error.issues.map((i) => ({ path: i.path.join("."), message: i.message })) },
    });
  }
  return parsed.data;
}

function budgetExceeded(agent: AgentId, amount: bigint, target: ApprovalRequest, failed: Headroom[]) {
  const first = failed[0]!;
  const what =
    first.limit === "perProvider" ? `per-provider limit for ${target.provider}` : `${first.limit} limit`;
  const message =
    first.limit === "perCall"
      ? `${usdc(amount)} is above agent "${agent}"'s per-call limit of ${usdc(first.limitAmount)}`
      : `${usdc(amount)} would exceed agent "${agent}"'s ${what} of ${usdc(first.limitAmount)} (${usdc(first.used)} already spent or reserved)`;
  return new TollgateError(ErrorCode.BudgetExceeded, message, {
    details: {
      agent,
      limit: first.limit,
      limitAmount: first.limitAmount.toString(),
      used: first.used.toString(),
      requested: amount.toString(),
      provider: target.provider,
      kind: target.kind,
      exceeded: failed.map((h) => h.limit),
    },
  });
}

function outcomeOf(row: SpendRow): SpendOutcome {
  return {
    id: row.id,
    status: row.status === "committed" ? "committed" : "released",
    reserved: row.reserved,
    committed: row.committed ?? 0n,
    late: row.late,
  };
}

/**
 * Opens the budget ledger over a migrated store.
 * @example
 * const ledger = createBudgetLedger({ store, clock: systemClock });
 * await ledger.setLimits("researcher", { total: 10_000_000n, daily: 2_000_000n, perCall: 50_000n });
 * const hold = await ledger.reserve("researcher", { amount: 10_000n, provider: payTo, kind: "one-time" });
 * try {
 *   await payer.pay(option);
 *   await ledger.commit(hold);
 * } finally {
 *   await ledger.release(hold); // no-op after a commit
 * }
 */
export function createBudgetLedger(options: BudgetLedgerOptions): BudgetLedger {
  const { store, clock, approval, logger } = options;
  const defaultTtl = options.reservationTtlSeconds ?? DEFAULT_RESERVATION_TTL_SECONDS;
  if (!Number.isInteger(defaultTtl) || defaultTtl <= 0 || defaultTtl > MAX_RESERVATION_TTL_SECONDS) {
    throw new TollgateError(
      ErrorCode.InvalidRequest,
      "reservationTtlSeconds must be a positive integer (≤ 7 days)",
    );
  }
  if (approval !== undefined && approval.threshold < 0n) {
    throw new TollgateError(ErrorCode.InvalidRequest, "the approval threshold must not be negative");
  }
  const createId = options.createId ?? randomUUID;
  /**
   * Holds approved with a subscription's first period (`withHold`), by agent and ref, until that
   * reservation expires: the next `hold` under the ref, up to the amount, is not asked about again.
   * In memory: after a restart the hold is simply asked about (never approved without a question).
   */
  const approvedHolds = new Map<string, { amount: bigint; until: number }>();
  const holdKey = (agent: string, ref: string) => `${agent}\n${ref}`;

  async function readLimits(tx: Queryable, agent: AgentId, lock: "" | "FOR UPDATE" | "FOR SHARE") {
    const row = await queryOneParsed(
      tx,
      LimitsRowSchema,
      `SELECT total_limit, daily_limit, per_call_limit, max_subscription_commitment
         FROM agent_budgets WHERE agent = $1 ${lock}`,
      [agent],
    );
    if (row === undefined) return undefined;
    const providers = await queryParsed(
      tx,
      ProviderLimitRowSchema,
      "SELECT provider, limit_amount FROM agent_provider_limits WHERE agent = $1 ORDER BY provider",
      [agent],
    );
    const limits: BudgetLimits = {};
    if (row.total_limit !== null) limits.total = row.total_limit;
    if (row.daily_limit !== null) limits.daily = row.daily_limit;
    if (row.per_call_limit !== null) limits.perCall = row.per_call_limit;
    if (providers.length > 0) {
      limits.perProvider = Object.fromEntries(providers.map((p) => [getAddress(p.provider), p.limit_amount]));
    }
    if (row.max_subscription_commitment !== null) {
      limits.maxSubscriptionCommitment = row.max_subscription_commitment;
    }
    return limits;
  }

  async function readUsage(tx: Queryable, agent: AgentId, now: Date): Promise<BudgetUsage> {
    const dayStart = new Date(now.getTime() - DAY_MS);
    const totals = await queryParsed(
      tx,
      TallyRowSchema,
      "SELECT provider, kind, spent FROM agent_spend_totals WHERE agent = $1",
      [agent],
    );
    // The rolling day is (now − 24 h, now]: a spend reserved exactly 24 h ago has left it.
    const daily = await queryParsed(
      tx,
      TallyRowSchema,
      `SELECT provider, kind, sum(committed) AS spent FROM agent_spends
        WHERE agent = $1 AND status = 'committed' AND reserved_at > $2
        GROUP BY provider, kind`,
      [agent, dayStart],
    );
    const open = await queryParsed(
      tx,
      OpenRowSchema,
      `SELECT provider, kind, ref, reserved, reserved_at FROM agent_spends
        WHERE agent = $1 AND status = 'reserved' AND expires_at > $2`,
      [agent, now],
    );
    const activeSubscriptions = await queryParsed(
      tx,
      SubscriptionRowSchema,
      "SELECT ref, provider, amount FROM agent_subscriptions WHERE agent = $1 AND active ORDER BY ref",
      [agent],
    );
    const holds = await queryParsed(
      tx,
      HoldRowSchema,
      "SELECT ref, provider, held, charged FROM agent_holds WHERE agent = $1 AND held > 0 ORDER BY ref",
      [agent],
    );
    return {
      totals,
      daily,
      holds,
      open: open.map((o) => ({
        provider: o.provider,
        kind: o.kind,
        ref: o.ref ?? undefined,
        amount: o.reserved,
        inDay: o.reserved_at.getTime() > dayStart.getTime(),
      })),
      activeSubscriptions,
    };
  }

  /** The agent's report inside `tx`, after taking its row lock; `undefined` if it has no budget. */
  async function loadReport(tx: Queryable, agent: AgentId, lock: "FOR UPDATE" | "FOR SHARE") {
    const limits = await readLimits(tx, agent, lock);
    if (limits === undefined) return undefined;
    // Read the clock after the lock: the order of "now" then agrees with the order of the holds.
    const at = new Date(clock.now());
    return buildBudgetReport({ agent, at, limits, usage: await readUsage(tx, agent, at) });
  }

  function assertFits(
    report: BudgetReport | undefined,
    agent: AgentId,
    target: ApprovalRequest,
  ): BudgetReport {
    if (report === undefined) {
      throw new TollgateError(ErrorCode.BudgetExceeded, `agent "${agent}" has no budget: set one first`, {
        details: { agent, limit: "budget", requested: target.amount.toString() },
      });
    }
    const failed = budgetHeadroom(report, target).filter((h) => target.amount > h.room);
    if (failed.length > 0) {
      const error = budgetExceeded(agent, target.amount, target, failed);
      logger?.info({ agent, ...error.details }, "budget: spend refused");
      throw error;
    }
    return report;
  }

  /**
   * Asks the approval hook about a spend above the threshold. Do not ask about a spend the limits
   * refuse anyway: `precheck` runs first. The hook runs outside any transaction (a person may take
   * minutes to answer); the caller checks the limits again, atomically, afterwards.
   */
  async function askApproval(
    target: ApprovalRequest,
    precheck: (report: BudgetReport | undefined) => unknown,
  ): Promise<void> {
    if (approval === undefined || target.amount <= approval.threshold) return;
    const { agent } = target;
    await store.transaction(async (tx) => precheck(await loadReport(tx, agent, "FOR SHARE")));
    let approved: boolean;
    try {
      approved = (await approval.hook(target)) === true;
    } catch (cause) {
      throw new TollgateError(ErrorCode.ApprovalDenied, "the approval hook failed", {
        details: { agent, requested: target.amount.toString(), threshold: approval.threshold.toString() },
        cause,
      });
    }
    if (!approved) {
      logger?.info(
        { agent, amount: target.amount.toString(), provider: target.provider },
        "budget: approval denied",
      );
      throw new TollgateError(
        ErrorCode.ApprovalDenied,
        `spending ${usdc(target.amount)} needs approval (above ${usdc(approval.threshold)}) and was denied`,
        {
          details: {
            agent,
            requested: target.amount.toString(),
            threshold: approval.threshold.toString(),
            provider: target.provider,
            kind: target.kind,
          },
        },
      );
    }
  }

  /**
   * The limits a standing hold is checked against: per provider, daily and total (a hold is not one
   * call, and the subscription commitment ceiling is checked on the period price when subscribing).
   */
  function assertHoldFits(report: BudgetReport | undefined, agent: AgentId, target: ApprovalRequest) {
    if (report === undefined) return assertFits(report, agent, target);
    const failed = budgetHeadroom(report, { provider: target.provider, kind: "metered" })
      .filter((h) => h.limit !== "perCall")
      .filter((h) => target.amount > h.room);
    if (failed.length > 0) {
      const error = budgetExceeded(agent, target.amount, target, failed);
      logger?.info({ agent, ...error.details }, "budget: hold refused");
      throw error;
    }
    return report;
  }

  async function lockSpend(tx: Queryable, id: string): Promise<SpendRow> {
    const owner = await queryOneParsed(tx, AgentRowSchema, "SELECT agent FROM agent_spends WHERE id = $1", [
      id,
    ]);
    if (owner === undefined) {
      throw new TollgateError(ErrorCode.NotFound, "no such reservation", { details: { id } });
    }
    // The agent's lock first, as reserve takes it: reserve's reads must not see a half-applied commit.
    await tx.query("SELECT 1 FROM agent_budgets WHERE agent = $1 FOR UPDATE", [owner.agent]);
    const row = await queryOneParsed(
      tx,
      SpendRowSchema,
      `SELECT id, agent, provider, kind, ref, reserved, committed, status, expires_at, late, parent_id
         FROM agent_spends WHERE id = $1`,
      [id],
    );
    return row!;
  }

  /** Takes `amount` out of the agent's open sale reservation `id` (its lock held); throws if it cannot. */
  async function drawFromSale(tx: Queryable, agent: AgentId, id: string, amount: bigint): Promise<void> {
    await tx.query("SELECT 1 FROM agent_budgets WHERE agent = $1 FOR UPDATE", [agent]);
    const drawn = await tx.query(
      `UPDATE agent_spends SET reserved = reserved - $3
        WHERE id = $1 AND agent = $2 AND status = 'reserved' AND parent_id IS NULL AND reserved >= $3
          AND expires_at > $4
        RETURNING id`,
      [id, agent, amount, new Date(clock.now())],
    );
    if (drawn.length === 0) {
      throw new TollgateError(
        ErrorCode.BudgetExceeded,
        `${usdc(amount)} is more than the sale reservation ${id} of agent "${agent}" still holds (or it is closed)`,
        { details: { agent, limit: "sale", requested: amount.toString(), sale: id } },
      );
    }
  }

  /** Gives `amount` of a drawn reservation back to its sale, if the sale is still open. */
  async function giveBackToSale(tx: Queryable, row: SpendRow, amount: bigint): Promise<void> {
    if (row.parent_id === null || amount <= 0n) return;
    await tx.query(
      `UPDATE agent_spends SET reserved = reserved + $2
        WHERE id = $1 AND status = 'reserved' AND expires_at > $3`,
      [row.parent_id, amount, new Date(clock.now())],
    );
  }

  return {
    store,
    async setLimits(agentInput, limitsInput) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const limits = parseOrThrow(BudgetLimitsSchema, limitsInput, "budget limits");
      await store.transaction(async (tx) => {
        await tx.query(
          `INSERT INTO agent_budgets (agent, total_limit, daily_limit, per_call_limit, max_subscription_commitment)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (agent) DO UPDATE SET total_limit = EXCLUDED.total_limit, daily_limit = EXCLUDED.daily_limit,
             per_call_limit = EXCLUDED.per_call_limit,
             max_subscription_commitment = EXCLUDED.max_subscription_commitment, updated_at = now()`,
          [agent, limits.total, limits.daily, limits.perCall, limits.maxSubscriptionCommitment],
        );
        await tx.query("DELETE FROM agent_provider_limits WHERE agent = $1", [agent]);
        for (const [provider, limit] of Object.entries(limits.perProvider ?? {})) {
          await tx.query(
            "INSERT INTO agent_provider_limits (agent, provider, limit_amount) VALUES ($1, $2, $3)",
            [agent, provider.toLowerCase(), limit],
          );
        }
      });
      logger?.info({ agent }, "budget: limits set");
      return limits;
    },

    async getLimits(agentInput) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      return store.transaction((tx) => readLimits(tx, agent, ""));
    },

    async reserve(agentInput, requestInput) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const request = parseOrThrow(ReserveRequestSchema, requestInput, "reservation request");
      const target: ApprovalRequest = {
        agent,
        amount: request.amount,
        provider: request.provider,
        kind: request.kind,
        ref: request.ref,
      };
      // One question for a subscription's whole commitment; the limits are checked on the first period.
      const withHold = request.withHold ?? 0n;
      const asked: ApprovalRequest =
        withHold > 0n ? { ...target, amount: request.amount + withHold, hold: withHold } : target;
      if (request.within === undefined)
        await askApproval(asked, (report) => assertFits(report, agent, target));
      const reservation = await store.transaction(async (tx) => {
        if (request.within !== undefined) await drawFromSale(tx, agent, request.within, request.amount);
        const report = assertFits(await loadReport(tx, agent, "FOR UPDATE"), agent, target);
        const reservedAt = report.at;
        const expiresAt = new Date(reservedAt.getTime() + (request.ttlSeconds ?? defaultTtl) * 1000);
        const id = createId();
        await tx.query(
          `INSERT INTO agent_spends (id, agent, provider, kind, ref, reserved, reserved_at, expires_at, parent_id)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
          [
            id,
            agent,
            request.provider.toLowerCase(),
            request.kind,
            request.ref,
            request.amount,
            reservedAt,
            expiresAt,
            request.within ?? null,
          ],
        );
        return {
          id,
          agent,
          provider: request.provider,
          kind: request.kind,
          ref: request.ref,
          amount: request.amount,
          reservedAt,
          expiresAt,
        } satisfies Reservation;
      });
      if (withHold > 0n && approval !== undefined && request.ref !== undefined) {
        approvedHolds.set(holdKey(agent, request.ref), {
          amount: withHold,
          until: reservation.expiresAt.getTime(),
        });
      }
      logger?.debug(
        { agent, id: reservation.id, amount: request.amount.toString(), kind: request.kind },
        "budget: reserved",
      );
      return reservation;
    },

    async commit(reservation, actualAmount) {
      if (actualAmount !== undefined && actualAmount < 0n) {
        throw new TollgateError(ErrorCode.InvalidRequest, "a committed amount must not be negative");
      }
      const outcome = await store.transaction(async (tx) => {
        const row = await lockSpend(tx, reservation.id);
        if (row.status === "committed") {
          if (actualAmount !== undefined && actualAmount !== row.committed) {
            throw new TollgateError(
              ErrorCode.InvalidRequest,
              "reservation already committed with another amount",
              {
                details: { id: row.id, committed: String(row.committed), requested: actualAmount.toString() },
              },
            );
          }
          return outcomeOf(row);
        }
        if (row.status === "released") {
          throw new TollgateError(
            ErrorCode.InvalidRequest,
            "reservation was released; it cannot be committed",
            {
              details: { id: row.id },
            },
          );
        }
        const amount = actualAmount ?? row.reserved;
        if (amount > row.reserved) {
          throw new TollgateError(
            ErrorCode.BudgetExceeded,
            `cannot commit ${usdc(amount)} against a reservation of ${usdc(row.reserved)}`,
            {
              details: {
                id: row.id,
                limit: "reservation",
                limitAmount: row.reserved.toString(),
                requested: amount.toString(),
              },
            },
          );
        }
        const now = new Date(clock.now());
        // An expired hold no longer counted, and its room may have gone to other spends; the money
        // moved anyway, so the spend is recorded (flagged late) rather than hidden from later checks.
        const late = row.expires_at.getTime() <= now.getTime();
        await tx.query(
          "UPDATE agent_spends SET status = 'committed', committed = $2, settled_at = $3, late = $4 WHERE id = $1",
          [row.id, amount, now, late],
        );
        await tx.query("DELETE FROM agent_pending_payments WHERE spend_id = $1", [row.id]);
        await giveBackToSale(tx, row, row.reserved - amount);
        await tx.query(
          `INSERT INTO agent_spend_totals (agent, provider, kind, spent) VALUES ($1, $2, $3, $4)
           ON CONFLICT (agent, provider, kind) DO UPDATE SET spent = agent_spend_totals.spent + EXCLUDED.spent`,
          [row.agent, row.provider, row.kind, amount],
        );
        if (row.kind === "subscription" && row.ref !== null) {
          await tx.query(
            `INSERT INTO agent_subscriptions (agent, ref, provider, amount, active, started_at)
             VALUES ($1, $2, $3, $4, true, $5)
             ON CONFLICT (agent, ref) DO UPDATE SET provider = EXCLUDED.provider, amount = EXCLUDED.amount,
               started_at = CASE WHEN agent_subscriptions.active THEN agent_subscriptions.started_at
                                 ELSE EXCLUDED.started_at END,
               active = true, ended_at = NULL`,
            [row.agent, row.ref, row.provider, amount, now],
          );
        }
        if (late) {
          logger?.warn(
            { agent: row.agent, id: row.id, amount: amount.toString() },
            "budget: committed after expiry",
          );
        }
        return { ...outcomeOf(row), status: "committed", committed: amount, late } satisfies SpendOutcome;
      });
      logger?.debug({ id: outcome.id, committed: outcome.committed.toString() }, "budget: committed");
      return outcome;
    },

    async release(reservation) {
      return store.transaction(async (tx) => {
        const row = await lockSpend(tx, reservation.id);
        if (row.status !== "reserved") return outcomeOf(row);
        await tx.query("UPDATE agent_spends SET status = 'released', settled_at = $2 WHERE id = $1", [
          row.id,
          new Date(clock.now()),
        ]);
        await tx.query("DELETE FROM agent_pending_payments WHERE spend_id = $1", [row.id]);
        await giveBackToSale(tx, row, row.reserved);
        logger?.debug({ id: row.id }, "budget: released");
        return { ...outcomeOf(row), status: "released", committed: 0n } satisfies SpendOutcome;
      });
    },

    async pend(reservation, payment) {
      const nonce = parseOrThrow(NonceSchema, payment.nonce, "payment nonce");
      const payer = parseOrThrow(AddressSchema, payment.payer, "payer address");
      const token =
        payment.token === undefined ? undefined : parseOrThrow(AddressSchema, payment.token, "token address");
      if (!Number.isSafeInteger(payment.validBefore) || payment.validBefore <= 0) {
        throw new TollgateError(ErrorCode.InvalidRequest, "validBefore must be unix seconds");
      }
      await store.transaction(async (tx) => {
        const row = await lockSpend(tx, reservation.id);
        if (row.status !== "reserved") return;
        const now = new Date(clock.now());
        // Held past the reservation's own expiry: the money may move at any time before validBefore.
        const until = new Date(Math.max(row.expires_at.getTime(), now.getTime() + PENDING_HOLD_MS));
        await tx.query("UPDATE agent_spends SET expires_at = $2 WHERE id = $1", [row.id, until]);
        await tx.query(
          `INSERT INTO agent_pending_payments (spend_id, agent, payer, nonce, valid_before, amount, created_at, target, token)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (spend_id) DO NOTHING`,
          [
            row.id,
            row.agent,
            payer.toLowerCase(),
            nonce.toLowerCase(),
            payment.validBefore,
            row.reserved,
            now,
            payment.target === undefined ? null : payment.target.slice(0, 2048),
            token === undefined ? null : token.toLowerCase(),
          ],
        );
      });
      logger?.warn({ id: reservation.id, nonce }, "budget: payment outcome unknown, held until read back");
    },

    async pendingPayments(agentInput) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const rows = await queryParsed(
        store,
        PendingRowSchema,
        `SELECT spend_id, agent, payer, nonce, valid_before, amount, created_at, target, token FROM agent_pending_payments
          WHERE agent = $1 ORDER BY created_at, spend_id`,
        [agent],
      );
      return rows.map((r) => ({
        spendId: r.spend_id,
        agent,
        payer: getAddress(r.payer),
        nonce: r.nonce as `0x${string}`,
        validBefore: Number(r.valid_before),
        amount: r.amount,
        createdAt: r.created_at,
        ...(r.target === null ? {} : { target: r.target }),
        ...(r.token === null ? {} : { token: getAddress(r.token) }),
      }));
    },

    async saleHeld(agentInput, id) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const row = await queryOneParsed(
        store,
        ReservedRowSchema,
        `SELECT reserved FROM agent_spends
          WHERE id = $1 AND agent = $2 AND status = 'reserved' AND parent_id IS NULL AND expires_at > $3`,
        [id, agent, new Date(clock.now())],
      );
      return row?.reserved ?? 0n;
    },

    async endSubscription(agentInput, ref) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      return store.transaction(async (tx) => {
        await tx.query("SELECT 1 FROM agent_budgets WHERE agent = $1 FOR UPDATE", [agent]);
        const ended = await tx.query(
          "UPDATE agent_subscriptions SET active = false, ended_at = $3 WHERE agent = $1 AND ref = $2 AND active RETURNING ref",
          [agent, ref, new Date(clock.now())],
        );
        return ended.length > 0;
      });
    },

    async hold(agentInput, requestInput) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const request = parseOrThrow(HoldRequestSchema, requestInput, "hold request");
      const target: ApprovalRequest = {
        agent,
        amount: request.amount,
        provider: request.provider,
        kind: "subscription",
        ref: request.ref,
      };
      // Approved with the subscription's first period: not asked again (once, up to what was approved).
      const approved = approvedHolds.get(holdKey(agent, request.ref));
      approvedHolds.delete(holdKey(agent, request.ref));
      if (approved === undefined || approved.amount < request.amount || clock.now() >= approved.until) {
        await askApproval(target, (report) => assertHoldFits(report, agent, target));
      }
      const held = await store.transaction(async (tx) => {
        const report = assertHoldFits(await loadReport(tx, agent, "FOR UPDATE"), agent, target);
        const rows = await queryParsed(
          tx,
          HeldRowSchema,
          `INSERT INTO agent_holds (agent, ref, provider, held, charged, updated_at) VALUES ($1, $2, $3, $4, 0, $5)
           ON CONFLICT (agent, ref) DO UPDATE SET held = agent_holds.held + EXCLUDED.held, updated_at = EXCLUDED.updated_at
           RETURNING held`,
          [agent, request.ref, request.provider.toLowerCase(), request.amount, report.at],
        );
        return rows[0]!.held;
      });
      logger?.debug({ agent, ref: request.ref, amount: request.amount.toString() }, "budget: held");
      return held;
    },

    async charge(agentInput, requestInput) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const request = parseOrThrow(ChargeRequestSchema, requestInput, "charge request");
      return store.transaction(async (tx) => {
        await tx.query("SELECT 1 FROM agent_budgets WHERE agent = $1 FOR UPDATE", [agent]);
        const row = await queryOneParsed(
          tx,
          HoldRowSchema,
          "SELECT ref, provider, held, charged FROM agent_holds WHERE agent = $1 AND ref = $2 FOR UPDATE",
          [agent, request.ref],
        );
        if (row === undefined) {
          throw new TollgateError(ErrorCode.NotFound, `agent "${agent}" has no hold ${request.ref}`, {
            details: { agent, ref: request.ref },
          });
        }
        const amount =
          "amount" in request
            ? request.amount
            : request.total > row.charged
              ? request.total - row.charged
              : 0n;
        if (amount === 0n) {
          return { ref: row.ref, amount, beyondHold: 0n, held: row.held, charged: row.charged };
        }
        const take = amount < row.held ? amount : row.held;
        const beyondHold = amount - take;
        const now = new Date(clock.now());
        // A spend that already happened: recorded committed at once (its hold was checked when placed).
        await tx.query(
          `INSERT INTO agent_spends (id, agent, provider, kind, ref, reserved, committed, status, reserved_at, expires_at, settled_at)
           VALUES ($1, $2, $3, $4, $5, $6, $6, 'committed', $7, $8, $7)`,
          [
            createId(),
            agent,
            row.provider,
            request.kind,
            request.ref,
            amount,
            now,
            new Date(now.getTime() + 1000),
          ],
        );
        await tx.query(
          `INSERT INTO agent_spend_totals (agent, provider, kind, spent) VALUES ($1, $2, $3, $4)
           ON CONFLICT (agent, provider, kind) DO UPDATE SET spent = agent_spend_totals.spent + EXCLUDED.spent`,
          [agent, row.provider, request.kind, amount],
        );
        const held = row.held - take;
        const charged = row.charged + amount;
        await tx.query(
          "UPDATE agent_holds SET held = $3, charged = $4, updated_at = $5 WHERE agent = $1 AND ref = $2",
          [agent, row.ref, held, charged, now],
        );
        if (beyondHold > 0n) {
          logger?.warn(
            { agent, ref: row.ref, amount: amount.toString(), beyondHold: beyondHold.toString() },
            "budget: a subscription took more than its hold",
          );
        }
        return { ref: row.ref, amount, beyondHold, held, charged };
      });
    },

    async releaseHold(agentInput, ref) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      return store.transaction(async (tx) => {
        await tx.query("SELECT 1 FROM agent_budgets WHERE agent = $1 FOR UPDATE", [agent]);
        const rows = await queryParsed(
          tx,
          HeldRowSchema,
          `UPDATE agent_holds h SET held = 0, updated_at = $3 FROM (SELECT held FROM agent_holds WHERE agent = $1 AND ref = $2) old
            WHERE h.agent = $1 AND h.ref = $2 RETURNING old.held`,
          [agent, ref, new Date(clock.now())],
        );
        return rows[0]?.held ?? 0n;
      });
    },

    async getHold(agentInput, ref) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const row = await queryOneParsed(
        store,
        HoldRowSchema,
        "SELECT ref, provider, held, charged FROM agent_holds WHERE agent = $1 AND ref = $2",
        [agent, ref],
      );
      return row === undefined
        ? undefined
        : { provider: getAddress(row.provider), held: row.held, charged: row.charged };
    },

    async report(agentInput) {
      const agent = parseOrThrow(AgentIdSchema, agentInput, "agent name");
      const report = await store.transaction((tx) => loadReport(tx, agent, "FOR SHARE"));
      if (report === undefined) {
        throw new TollgateError(ErrorCode.NotFound, `agent "${agent}" has no budget`, { details: { agent } });
      }
      return report;
    },
  };
}
