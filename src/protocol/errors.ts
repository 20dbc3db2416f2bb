import { z } from "zod";

/**
 * The error-code catalogue (docs/protocol.md, "Errors") and the one error class every Tollgate module throws.
 *
 * Codes are stable strings: clients branch on them, so a code is never renamed, only added.
 */
export const ErrorCode = {
  // Gate 402 `error` values.
  PaymentRequired: "PaymentRequired",
  InvalidPaymentProof: "InvalidPaymentProof",
  SubscriptionNotActive: "SubscriptionNotActive",
  SubscriptionAuthInvalid: "SubscriptionAuthInvalid",
  AllowanceExhausted: "AllowanceExhausted",
  PlanDeprecated: "PlanDeprecated",
  /** A channel voucher that is malformed, badly signed, or for another channel, payee, chain or contract. */
  ChannelVoucherInvalid: "ChannelVoucherInvalid",
  /** A channel voucher whose cumulative amount does not cover this request (`details.highest`, `details.spent`). */
  ChannelVoucherStale: "ChannelVoucherStale",
  /** A channel voucher above the channel's deposit: top the channel up or open another. */
  ChannelDepositExhausted: "ChannelDepositExhausted",
  /** A channel that is closed, or whose close was requested and is near its deadline. */
  ChannelClosing: "ChannelClosing",
  // Facilitator and market errors.
  InvalidRequest: "InvalidRequest",
  Unauthorized: "Unauthorized",
  /** A browser request the dashboard refuses: cross-site, or without its form's CSRF token. */
  Forbidden: "Forbidden",
  NotFound: "NotFound",
  PayloadTooLarge: "PayloadTooLarge",
  InsufficientFunds: "InsufficientFunds",
  NonceAlreadyUsed: "NonceAlreadyUsed",
  InvalidSignature: "InvalidSignature",
  AuthorizationExpired: "AuthorizationExpired",
  AmountMismatch: "AmountMismatch",
  UnsupportedNetwork: "UnsupportedNetwork",
  UnsupportedToken: "UnsupportedToken",
  RateLimited: "RateLimited",
  ChainUnavailable: "ChainUnavailable",
  /**
   * A gate's answer to a proof its request is still being served with (or was, by a gate that died
   * before answering): re-send the same proof after `Retry-After`, when its claim lapses.
   */
  PaymentInFlight: "PaymentInFlight",
  /**
   * The token's issuer paused it (USDC's pauser): no transfer can settle until it is unpaused. New
   * payments are refused until then; ones accepted before are held and settle after (docs/facilitator.md).
   */
  TokenPaused: "TokenPaused",
  /**
   * The token's issuer blacklisted the payer or the payee (USDC's blacklister): the token refuses every
   * transfer from or to it, so the payment cannot settle. `details.account`, `details.role` ("payer" or
   * "payee") and `details.token` say which. Not worth retrying until the issuer lifts it.
   */
  AccountBlacklisted: "AccountBlacklisted",
  // Client-side only.
  BudgetExceeded: "BudgetExceeded",
  ApprovalDenied: "ApprovalDenied",
  PriceCeilingExceeded: "PriceCeilingExceeded",
  PaidRequestFailed: "PaidRequestFailed",
  /** A seller's server did not answer (connection refused, DNS, timeout): nothing it sold was served. */
  SellerUnreachable: "SellerUnreachable",
  /** The agent's language model did not answer (connection refused, host unknown, timeout). */
  ModelUnreachable: "ModelUnreachable",
  /**
   * A seller's 402 asks for something other than what it listed (a higher price, other plan terms,
   * another payee, network or token): refused before anything is signed (docs/budgets.md).
   */
  OfferMismatch: "OfferMismatch",
  /**
   * A reseller cannot take this sale now: its own budget cannot reserve what serving it may cost its
   * suppliers. Answered before the buyer pays (instead of a 402), so nothing was taken.
   */
  SaleNotAdmitted: "SaleNotAdmitted",
  // Codec faults: untrusted bytes that are not what they claim to be.
  InvalidEncoding: "InvalidEncoding",
  HeaderTooLarge: "HeaderTooLarge",
  InvalidAmount: "InvalidAmount",
  Internal: "Internal",
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** The `error` values a gate may put in a 402 body. */
export const GateErrorCodes = [
  ErrorCode.PaymentRequired,
  ErrorCode.InvalidPaymentProof,
  ErrorCode.SubscriptionNotActive,
  ErrorCode.SubscriptionAuthInvalid,
  ErrorCode.AllowanceExhausted,
  ErrorCode.PlanDeprecated,
  ErrorCode.ChannelVoucherInvalid,
  ErrorCode.ChannelVoucherStale,
  ErrorCode.ChannelDepositExhausted,
  ErrorCode.ChannelClosing,
] as const;
export type GateErrorCode = (typeof GateErrorCodes)[number];

/** HTTP status for each code when it is the outcome of a facilitator or market request. */
const statusByCode: Record<ErrorCode, number> = {
  PaymentRequired: 402,
  InvalidPaymentProof: 402,
  SubscriptionNotActive: 402,
  SubscriptionAuthInvalid: 402,
  AllowanceExhausted: 402,
  PlanDeprecated: 410,
  ChannelVoucherInvalid: 402,
  ChannelVoucherStale: 402,
  ChannelDepositExhausted: 402,
  ChannelClosing: 402,
  InvalidRequest: 400,
  Unauthorized: 401,
  Forbidden: 403,
  NotFound: 404,
  PayloadTooLarge: 413,
  InsufficientFunds: 402,
  NonceAlreadyUsed: 409,
  InvalidSignature: 422,
  AuthorizationExpired: 422,
  AmountMismatch: 422,
  UnsupportedNetwork: 422,
  UnsupportedToken: 422,
  RateLimited: 429,
  ChainUnavailable: 503,
  PaymentInFlight: 503,
  TokenPaused: 503,
  AccountBlacklisted: 403,
  BudgetExceeded: 402,
  ApprovalDenied: 403,
  PriceCeilingExceeded: 402,
  PaidRequestFailed: 502,
  SellerUnreachable: 502,
  ModelUnreachable: 502,
  OfferMismatch: 502,
  SaleNotAdmitted: 503,
  InvalidEncoding: 400,
  HeaderTooLarge: 400,
  InvalidAmount: 400,
  Internal: 500,
};

export function httpStatusOf(code: ErrorCode): number {
  return statusByCode[code];
}

export type TollgateErrorOptions = {
  details?: Record<string, unknown> | undefined;
  cause?: unknown;
  /** Seconds a caller should wait before trying again (RateLimited, ChainUnavailable). */
  retryAfter?: number | undefined;
};

/** The base error: a stable `code`, a short message, structured `details` and the `cause`. */
export class TollgateError extends Error {
  override readonly name: string = "TollgateError";
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;
  readonly retryAfter: number | undefined;

  constructor(code: ErrorCode, message: string, options: TollgateErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = options.details;
    this.retryAfter = options.retryAfter;
  }

  get status(): number {
    return httpStatusOf(this.code);
  }

  /** The wire body of docs/protocol.md, "Errors". */
  toBody(): ErrorBody {
    return {
      error: {
        code: this.code,
        message: this.message,
        ...(this.details === undefined ? {} : { details: this.details }),
      },
    };
  }
}

export function isTollgateError(value: unknown, code?: ErrorCode): value is TollgateError {
  return value instanceof TollgateError && (code === undefined || value.code === code);
}

/** Every code, in catalogue order: the domain of `ErrorCodeSchema`. */
export const ErrorCodes = Object.values(ErrorCode) as [ErrorCode, ...ErrorCode[]];

export const ErrorCodeSchema = z.enum(ErrorCodes);

export const GateErrorCodeSchema = z.enum(GateErrorCodes);

/**
 * The facilitator and market error body of docs/protocol.md, "Errors": `{ "error": { code, message, details? } }`.
 *
 * A reader that meets a code it does not know fails to parse and should treat the reply as an opaque
 * failure of the HTTP status it came with; codes are only ever added.
 */
export const ErrorBodySchema = z.object({
  error: z.object({
    code: ErrorCodeSchema,
    message: z.string(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

/** Rebuilds the typed error a peer sent as an `ErrorBody`, e.g. in a client reading a facilitator reply. */
export function errorFromBody(
  body: ErrorBody,
  options: { retryAfter?: number | undefined } = {},
): TollgateError {
  return new TollgateError(body.error.code, body.error.message, {
    details: body.error.details,
    retryAfter: options.retryAfter,
  });
}
