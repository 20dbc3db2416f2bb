import { describe, expect, it } from "vitest";
import {
  ErrorBodySchema,
  ErrorCode,
  ErrorCodes,
  errorFromBody,
  GateErrorCodes,
  httpStatusOf,
  isTollgateError,
  TollgateError,
} from "./errors.ts";

describe("error catalogue", () => {
  it("keeps the list of codes stable (codes are only ever added)", () => {
    expect(ErrorCodes).toMatchInlineSnapshot(`
      [
        "PaymentRequired",
        "InvalidPaymentProof",
        "SubscriptionNotActive",
        "SubscriptionAuthInvalid",
        "AllowanceExhausted",
        "PlanDeprecated",
        "ChannelVoucherInvalid",
        "ChannelVoucherStale",
        "ChannelDepositExhausted",
        "ChannelClosing",
        "InvalidRequest",
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "PayloadTooLarge",
        "InsufficientFunds",
        "NonceAlreadyUsed",
        "InvalidSignature",
        "AuthorizationExpired",
        "AmountMismatch",
        "UnsupportedNetwork",
        "UnsupportedToken",
        "RateLimited",
        "ChainUnavailable",
        "PaymentInFlight",
        "TokenPaused",
        "AccountBlacklisted",
        "BudgetExceeded",
        "ApprovalDenied",
        "PriceCeilingExceeded",
        "PaidRequestFailed",
        "SellerUnreachable",
        "ModelUnreachable",
        "OfferMismatch",
        "SaleNotAdmitted",
        "InvalidEncoding",
        "HeaderTooLarge",
        "InvalidAmount",
        "Internal",
      ]
    `);
  });

  it("names every code by itself", () => {
    for (const [key, value] of Object.entries(ErrorCode)) expect(value).toBe(key);
  });

  it("maps every code to an HTTP error status", () => {
    for (const code of ErrorCodes) {
      const status = httpStatusOf(code);
      expect(Number.isInteger(status), code).toBe(true);
      expect(status >= 400 && status <= 599, `${code} → ${status}`).toBe(true);
    }
  });

  it("gives the statuses the error catalogue fixes", () => {
    expect(
      Object.fromEntries(
        (
          [
            "InvalidRequest",
            "Unauthorized",
            "InsufficientFunds",
            "NonceAlreadyUsed",
            "PlanDeprecated",
            "InvalidSignature",
            "AuthorizationExpired",
            "AmountMismatch",
            "UnsupportedNetwork",
            "UnsupportedToken",
            "RateLimited",
            "ChainUnavailable",
          ] as const
        ).map((code) => [code, httpStatusOf(code)]),
      ),
    ).toEqual({
      InvalidRequest: 400,
      Unauthorized: 401,
      InsufficientFunds: 402,
      NonceAlreadyUsed: 409,
      PlanDeprecated: 410,
      InvalidSignature: 422,
      AuthorizationExpired: 422,
      AmountMismatch: 422,
      UnsupportedNetwork: 422,
      UnsupportedToken: 422,
      RateLimited: 429,
      ChainUnavailable: 503,
    });
  });

  it("answers bad input with a 4xx, never a 500", () => {
    for (const code of ["InvalidRequest", "InvalidEncoding", "HeaderTooLarge", "InvalidAmount"] as const) {
      expect(httpStatusOf(code)).toBeLessThan(500);
    }
  });

  it("lists the gate's 402 codes", () => {
    expect(GateErrorCodes).toEqual([
      "PaymentRequired",
      "InvalidPaymentProof",
      "SubscriptionNotActive",
      "SubscriptionAuthInvalid",
      "AllowanceExhausted",
      "PlanDeprecated",
      "ChannelVoucherInvalid",
      "ChannelVoucherStale",
      "ChannelDepositExhausted",
      "ChannelClosing",
    ]);
  });
});

describe("TollgateError", () => {
  it("serializes to a body that ErrorBodySchema accepts and that rebuilds the error", () => {
    const error = new TollgateError("RateLimited", "slow down", { details: { limit: 10 }, retryAfter: 3 });
    const body = ErrorBodySchema.parse(JSON.parse(JSON.stringify(error.toBody())));
    expect(body).toEqual({ error: { code: "RateLimited", message: "slow down", details: { limit: 10 } } });
    const rebuilt = errorFromBody(body, { retryAfter: 3 });
    expect(rebuilt).toBeInstanceOf(TollgateError);
    expect([rebuilt.code, rebuilt.message, rebuilt.details, rebuilt.retryAfter, rebuilt.status]).toEqual([
      "RateLimited",
      "slow down",
      { limit: 10 },
      3,
      429,
    ]);
  });

  it("omits details from the body when there are none", () => {
    expect(new TollgateError("NotFound", "no such plan").toBody()).toEqual({
      error: { code: "NotFound", message: "no such plan" },
    });
  });

  it("refuses bodies with unknown codes or missing messages", () => {
    expect(ErrorBodySchema.safeParse({ error: { code: "Teapot", message: "x" } }).success).toBe(false);
    expect(ErrorBodySchema.safeParse({ error: { code: "NotFound" } }).success).toBe(false);
    expect(ErrorBodySchema.safeParse({ code: "NotFound", message: "x" }).success).toBe(false);
  });

  it("is recognised by isTollgateError, optionally by code", () => {
    const error = new TollgateError("NotFound", "gone");
    expect(isTollgateError(error)).toBe(true);
    expect(isTollgateError(error, "NotFound")).toBe(true);
    expect(isTollgateError(error, "Internal")).toBe(false);
    expect(isTollgateError(new Error("gone"))).toBe(false);
  });

  it("keeps its cause", () => {
    const cause = new Error("root");
    expect(new TollgateError("Internal", "wrapped", { cause }).cause).toBe(cause);
  });
});
