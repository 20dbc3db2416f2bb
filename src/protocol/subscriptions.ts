/**
 * Wire bodies of the facilitator's provider, subscription, usage and event-feed endpoints
 * (docs/subscriptions.md describes the behaviour behind them). Amounts, ids and chain
 * timestamps are decimal strings, addresses come out checksummed.
 */
import { z } from "zod";
import { AddressSchema, Hex32Schema, SignatureSchema } from "./address.ts";
import { AtomicAmountSchema, UintStringSchema } from "./amount.ts";
import { SubscriptionStatusSchema } from "./facilitator.ts";

// ---- providers ---------------------------------------------------------------------------------

/** `POST /providers/challenge` request: the payout address that will sign the challenge. */
export const ProviderChallengeRequestSchema = z.strictObject({ address: AddressSchema });
export type ProviderChallengeRequest = z.infer<typeof ProviderChallengeRequestSchema>;

/**
 * `POST /providers/challenge` reply. `challenge` is the exact text to sign with EIP-191
 * (`personal_sign`, viem `signMessage({ message: challenge })`); it works once, until `expiresAt`
 * (unix seconds).
 */
export const ProviderChallengeResponseSchema = z.object({
  challenge: z.string().min(1).max(1024),
  expiresAt: z.int().nonnegative(),
});
export type ProviderChallengeResponse = z.infer<typeof ProviderChallengeResponseSchema>;

/** `POST /providers` request: the challenge and the payout address's signature over it. */
export const ProviderRegisterRequestSchema = z.strictObject({
  address: AddressSchema,
  challenge: z.string().min(1).max(1024),
  /** EIP-191 signature; longer than 65 bytes for a contract wallet (ERC-1271). */
  signature: z
    .string()
    .regex(/^0x(?:[0-9a-fA-F]{2}){65,2048}$/, { error: "expected a 0x-hex signature" })
    .transform((text) => text.toLowerCase() as `0x${string}`),
});
export type ProviderRegisterRequest = z.infer<typeof ProviderRegisterRequestSchema>;

/** An API key as listed: never the key itself, which is shown once at registration. */
export const ProviderApiKeyInfoSchema = z.object({
  id: z.int().positive(),
  /** The key's first characters (`tg_AbCd…`), to tell keys apart. */
  prefix: z.string(),
  createdAt: z.iso.datetime(),
});
export type ProviderApiKeyInfo = z.infer<typeof ProviderApiKeyInfoSchema>;

/** `POST /providers` reply (201): a new API key for the provider, shown this once. */
export const ProviderRegisterResponseSchema = z.object({
  provider: AddressSchema,
  apiKey: z.string().regex(/^tg_[A-Za-z0-9_-]{32}$/),
  key: ProviderApiKeyInfoSchema,
});
export type ProviderRegisterResponse = z.infer<typeof ProviderRegisterResponseSchema>;

/** `GET /providers/me` reply: the authenticated provider and its active keys. */
export const ProviderAccountSchema = z.object({
  provider: AddressSchema,
  keys: z.array(ProviderApiKeyInfoSchema),
});
export type ProviderAccount = z.infer<typeof ProviderAccountSchema>;

// ---- plans and subscriptions --------------------------------------------------------------------

/** Unix seconds (chain time). */
const ChainTimeSchema = z.int().nonnegative();

/** `GET /plans/:id` reply: a SubscriptionManager plan. */
export const PlanInfoSchema = z.object({
  planId: UintStringSchema,
  provider: AddressSchema,
  token: AddressSchema,
  /** Price per period, atomic units. */
  amount: AtomicAmountSchema,
  /** Period length in seconds. */
  interval: z.int().positive(),
  includedUnits: UintStringSchema,
  overageUnitPrice: AtomicAmountSchema,
  deprecated: z.boolean(),
  /** Where new subscribers are pointed once the plan is deprecated. */
  successorPlanId: UintStringSchema.nullable(),
});
export type PlanInfo = z.infer<typeof PlanInfoSchema>;

/** `GET /subscriptions/:id` reply: the subscription as the chain has it now, with its plan's terms. */
export const SubscriptionInfoSchema = z.object({
  subscriptionId: UintStringSchema,
  planId: UintStringSchema,
  subscriber: AddressSchema,
  provider: AddressSchema,
  token: AddressSchema,
  amount: AtomicAmountSchema,
  interval: z.int().positive(),
  status: SubscriptionStatusSchema,
  createdAt: ChainTimeSchema,
  periodStart: ChainTimeSchema,
  currentPeriodEnd: ChainTimeSchema,
  /** When the next renewal is charged: `currentPeriodEnd` while Active or PastDue, else null. */
  nextChargeAt: ChainTimeSchema.nullable(),
  /**
   * While Paused: the paid seconds that were left when it was paused (information only: the period keeps
   * running while paused and resume does not give the paused time back). 0 otherwise.
   */
  pausedRemaining: z.int().nonnegative(),
  maxOverage: AtomicAmountSchema,
  overageUsed: AtomicAmountSchema,
  /**
   * The most that may ever be pulled for the subscription (first period, renewals and overage), as
   * the subscriber signed or raised it; 2^256 − 1 is no limit. Absent from an older facilitator.
   */
  spendLimit: AtomicAmountSchema.optional(),
  /** Everything pulled for it so far, counted against `spendLimit`. */
  spent: AtomicAmountSchema.optional(),
  /**
   * While PastDue: why its last renewal failed, decoded from the chain's revert (`code` such as
   * `AccountBlacklisted` or `InsufficientFunds`, and a message). Absent otherwise, or before it is indexed.
   */
  renewalFailure: z.object({ code: z.string().max(64), message: z.string().max(500) }).optional(),
  /** The chain's latest block time when this was read. */
  chainTime: ChainTimeSchema,
});
export type SubscriptionInfo = z.infer<typeof SubscriptionInfoSchema>;

/** An EIP-2612 permit letting the SubscriptionManager pull from the subscriber (gasless approval). */
export const PermitSchema = z.strictObject({
  value: AtomicAmountSchema,
  deadline: UintStringSchema,
  signature: SignatureSchema,
});
export type Permit = z.infer<typeof PermitSchema>;

/**
 * `POST /subscriptions` request: the subscriber's EIP-712 `Subscribe` intent (docs/contracts.md) and,
 * when the manager's allowance is short, a permit the facilitator submits first.
 */
export const SubscribeRequestSchema = z.strictObject({
  subscriber: AddressSchema,
  planId: UintStringSchema,
  maxOverage: AtomicAmountSchema,
  /** The spend limit the intent signed; absent means none (2^256 − 1 signed). */
  spendLimit: AtomicAmountSchema.optional(),
  deadline: UintStringSchema,
  signature: SignatureSchema,
  permit: PermitSchema.optional(),
});
export type SubscribeRequest = z.infer<typeof SubscribeRequestSchema>;

/** `POST /subscriptions` reply (201): the new subscription, its first period already charged. */
export const SubscribeResponseSchema = z.object({
  subscriptionId: UintStringSchema,
  transaction: Hex32Schema,
  /** The permit's own transaction, when one was submitted. */
  permitTransaction: Hex32Schema.optional(),
  subscription: SubscriptionInfoSchema,
});
export type SubscribeResponse = z.infer<typeof SubscribeResponseSchema>;

/**
 * `POST /subscriptions/approval` request: an EIP-2612 permit the owner signed for the SubscriptionManager
 * (the spender), relayed outside a subscribe so a subscriber can top up the allowance its renewals are
 * pulled from. `nonce` is the token's `nonces(owner)` the permit was signed with, so a used permit is
 * told apart from a bad signature (409 `NonceAlreadyUsed`).
 */
export const ApprovalRequestSchema = PermitSchema.extend({
  owner: AddressSchema,
  token: AddressSchema,
  spender: AddressSchema,
  nonce: UintStringSchema,
});
export type ApprovalRequest = z.infer<typeof ApprovalRequestSchema>;

/** `POST /subscriptions/approval` reply: the permit's transaction and the manager's allowance after it. */
export const ApprovalResponseSchema = z.object({
  owner: AddressSchema,
  token: AddressSchema,
  spender: AddressSchema,
  value: AtomicAmountSchema,
  nonce: UintStringSchema,
  transaction: Hex32Schema,
  allowance: AtomicAmountSchema,
});
export type ApprovalResponse = z.infer<typeof ApprovalResponseSchema>;

/** Relayed lifecycle actions: `POST /subscriptions/:id/<action>`. */
export const SubscriptionActionSchema = z.enum(["pause", "resume", "cancel", "overage", "limit"]);
export type SubscriptionAction = z.infer<typeof SubscriptionActionSchema>;

/** `POST /subscriptions/:id/{pause|resume|cancel}` request: the subscriber's signed intent. */
export const SubscriptionActionRequestSchema = z.strictObject({
  deadline: UintStringSchema,
  signature: SignatureSchema,
});
export type SubscriptionActionRequest = z.infer<typeof SubscriptionActionRequestSchema>;

/** `POST /subscriptions/:id/overage` request: a signed `SetMaxOverage` intent. */
export const SetMaxOverageRequestSchema = z.strictObject({
  maxOverage: AtomicAmountSchema,
  deadline: UintStringSchema,
  signature: SignatureSchema,
});
export type SetMaxOverageRequest = z.infer<typeof SetMaxOverageRequestSchema>;

/** `POST /subscriptions/:id/limit` request: a signed `SetSpendLimit` intent. */
export const SetSpendLimitRequestSchema = z.strictObject({
  spendLimit: AtomicAmountSchema,
  deadline: UintStringSchema,
  signature: SignatureSchema,
});
export type SetSpendLimitRequest = z.infer<typeof SetSpendLimitRequestSchema>;

/** Reply to every relayed lifecycle action: the transaction and the subscription after it. */
export const SubscriptionActionResponseSchema = z.object({
  subscriptionId: UintStringSchema,
  action: SubscriptionActionSchema,
  transaction: Hex32Schema,
  subscription: SubscriptionInfoSchema,
});
export type SubscriptionActionResponse = z.infer<typeof SubscriptionActionResponseSchema>;

/**
 * `GET /subscribers/:address` reply: what a subscriber needs to sign its next intent without an RPC
 * of its own (intent nonce, chain time for deadlines, the token's permit nonce and allowance), and
 * its subscriptions as indexed.
 */
export const SubscriberInfoSchema = z.object({
  subscriber: AddressSchema,
  /** `nonces(subscriber)` of the SubscriptionManager: the next intent must carry it. */
  intentNonce: UintStringSchema,
  chainTime: ChainTimeSchema,
  manager: AddressSchema,
  token: z
    .object({
      address: AddressSchema,
      permitNonce: UintStringSchema,
      /** What the manager may pull now. */
      allowance: AtomicAmountSchema,
      balance: AtomicAmountSchema,
    })
    .optional(),
  subscriptions: z.array(
    z.object({
      subscriptionId: UintStringSchema,
      planId: UintStringSchema,
      provider: AddressSchema,
      status: SubscriptionStatusSchema,
      currentPeriodEnd: ChainTimeSchema,
    }),
  ),
});
export type SubscriberInfo = z.infer<typeof SubscriberInfoSchema>;

// ---- event feed -------------------------------------------------------------------------------

/** One entry of the facilitator's event log (`GET /events`). */
export const FeedEventSchema = z.object({
  id: z.int().positive(),
  type: z.string(),
  /** When it was recorded, unix seconds (wall clock of the facilitator's database). */
  created: z.int().nonnegative(),
  data: z.record(z.string(), z.unknown()),
});
export type FeedEvent = z.infer<typeof FeedEventSchema>;

const MAX_XID8 = 2n ** 64n - 1n;

/**
 * A position in the event log (`GET /events?after=`), opaque to readers: pass a reply's `next` back
 * as `after`. The facilitator writes `<transaction id>.<event id>`, both decimal with no leading
 * zeros: the log is read in (transaction, id) order over finished transactions only, because ids are
 * taken before commit and a lower id may become visible after a higher one (migration 0020).
 */
export const EventCursorSchema = z
  .string()
  .max(40)
  .regex(/^(0|[1-9][0-9]{0,19})\.(0|[1-9][0-9]{0,15})$/, {
    error: "expected a cursor from a previous reply's `next`",
  })
  .refine(
    (text) => {
      const [tx = "", id = ""] = text.split(".");
      return BigInt(tx) <= MAX_XID8 && Number(id) <= Number.MAX_SAFE_INTEGER;
    },
    { error: "cursor out of range" },
  );
export type EventCursor = z.infer<typeof EventCursorSchema>;

/** `GET /events` reply. Pass `next` back as `after` to continue (it equals `after` when nothing is new). */
export const EventFeedResponseSchema = z.object({
  events: z.array(FeedEventSchema),
  next: EventCursorSchema,
});
export type EventFeedResponse = z.infer<typeof EventFeedResponseSchema>;

// ---- metered usage ----------------------------------------------------------------------------

/** A provider's idempotency key for one usage record: 1–64 printable ASCII characters, no spaces. */
export const UsageRefSchema = z.string().regex(/^[\x21-\x7e]{1,64}$/, {
  error: "expected 1 to 64 printable ASCII characters without spaces",
});

/** One metered deduction a provider asks the facilitator to settle. */
export const UsageRecordInputSchema = z.strictObject({
  subscriptionId: UintStringSchema,
  /** Atomic units pulled from the subscriber's overage allowance; more than 0. */
  amount: AtomicAmountSchema.refine((text) => text !== "0", { error: "amount must be above 0" }),
  ref: UsageRefSchema,
});
export type UsageRecordInput = z.infer<typeof UsageRecordInputSchema>;

/** `POST /usage` request (provider-authenticated). */
export const UsageRequestSchema = z.strictObject({
  records: z.array(UsageRecordInputSchema).min(1).max(1000),
});
export type UsageRequest = z.infer<typeof UsageRequestSchema>;

/**
 * `POST /usage/exhausted` (provider-authenticated): a gate refused a metered call of one of the
 * provider's subscriptions at its overage cap. `amount` is the charge that did not fit (smallest unit).
 */
export const UsageExhaustedRequestSchema = z.strictObject({
  subscriptionId: UintStringSchema,
  amount: AtomicAmountSchema.optional(),
});
export type UsageExhaustedRequest = z.infer<typeof UsageExhaustedRequestSchema>;

/** `recorded`: this report emitted `allowance.exhausted`; false when this cycle's event was already emitted. */
export const UsageExhaustedResponseSchema = z.object({ recorded: z.boolean() });
export type UsageExhaustedResponse = z.infer<typeof UsageExhaustedResponseSchema>;

export const UsageRecordStatusSchema = z.enum(["pending", "submitted", "settled", "failed"]);
export type UsageRecordStatus = z.infer<typeof UsageRecordStatusSchema>;

/** A usage record as the facilitator holds it. */
export const UsageRecordSchema = z.object({
  ref: UsageRefSchema,
  subscriptionId: UintStringSchema,
  amount: AtomicAmountSchema,
  status: UsageRecordStatusSchema,
  /** The deductAllowanceMany transaction, once sent. */
  transaction: Hex32Schema.nullable(),
  /** Why a failed record failed: `AllowanceExhausted`, `SubscriptionNotActive`, `InsufficientFunds`, … */
  failure: z.object({ code: z.string(), message: z.string() }).nullable(),
});
export type UsageRecord = z.infer<typeof UsageRecordSchema>;

/** `POST /usage` reply (202): every record of the request, `duplicate` when its ref was already recorded. */
export const UsageResponseSchema = z.object({
  accepted: z.array(UsageRecordSchema.extend({ duplicate: z.boolean() })),
});
export type UsageResponse = z.infer<typeof UsageResponseSchema>;

export const UsageTotalsSchema = z.object({ count: z.int().nonnegative(), amount: AtomicAmountSchema });
export type UsageTotals = z.infer<typeof UsageTotalsSchema>;

/**
 * `GET /usage?subscriptionId=<id>` reply: the provider's records for one subscription by state, and
 * the subscription's on-chain cap. A gate bounds its exposure with
 * `maxOverage − overageUsed − unsettled` (unsettled = pending + submitted).
 */
export const UsageSummarySchema = z.object({
  subscriptionId: UintStringSchema,
  maxOverage: AtomicAmountSchema,
  overageUsed: AtomicAmountSchema,
  recorded: UsageTotalsSchema,
  unsettled: UsageTotalsSchema,
  settled: UsageTotalsSchema,
  failed: UsageTotalsSchema,
});
export type UsageSummary = z.infer<typeof UsageSummarySchema>;

/** `GET /usage?refs=<a,b,…>` reply: the provider's records with those refs (unknown refs are absent). */
export const UsageRecordsResponseSchema = z.object({ records: z.array(UsageRecordSchema) });
export type UsageRecordsResponse = z.infer<typeof UsageRecordsResponseSchema>;
