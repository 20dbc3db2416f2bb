/**
 * Turns SubscriptionManager (and token permit) reverts into the error codes of docs/protocol.md, "Errors", so a
 * relayed call refused by the chain answers with a code the client can act on, never a 500.
 */
import { BaseError, ContractFunctionRevertedError } from "viem";
import { subscriptionStatusName } from "../../../chain/events/subscriptionStatus.ts";
import { toChainError } from "../../../facilitator/chainErrors.ts";
import { type ErrorCode, TollgateError } from "../../../protocol/errors.ts";

type Mapping = {
  code: ErrorCode;
  message: string;
  details?: (args: readonly unknown[]) => Record<string, unknown>;
};

const str = (value: unknown) => (typeof value === "bigint" ? value.toString() : String(value));

const byName: Record<string, Mapping> = {
  PlanNotFound: { code: "NotFound", message: "no such plan", details: (a) => ({ planId: str(a[0]) }) },
  PlanIsDeprecated: {
    code: "PlanDeprecated",
    message: "the plan is deprecated and takes no new subscribers",
    details: (a) => ({
      planId: str(a[0]),
      successorPlanId: a[1] === 0n || a[1] === undefined ? null : str(a[1]),
    }),
  },
  SubscriptionNotFound: {
    code: "NotFound",
    message: "no such subscription",
    details: (a) => ({ subscriptionId: str(a[0]) }),
  },
  InvalidStatus: {
    code: "InvalidRequest",
    message: "the subscription's status does not allow this",
    details: (a) => ({ reason: "invalid_status", subscriptionId: str(a[0]), status: statusText(a[1]) }),
  },
  SignatureExpired: {
    code: "AuthorizationExpired",
    message: "the intent's deadline has passed on chain",
    details: (a) => ({ deadline: str(a[0]) }),
  },
  PermitExpired: { code: "AuthorizationExpired", message: "the permit's deadline has passed on chain" },
  InvalidSignature: { code: "InvalidSignature", message: "the signature is not the subscriber's" },
  ECDSAInvalidSignature: { code: "InvalidSignature", message: "the signature is malformed" },
  ECDSAInvalidSignatureS: { code: "InvalidSignature", message: "the signature is not low-s" },
  ECDSAInvalidSignatureLength: { code: "InvalidSignature", message: "the signature has the wrong length" },
  TransferFailed: {
    code: "InsufficientFunds",
    message: "the token transfer failed: the subscriber's balance or allowance is short",
  },
  AllowanceExhausted: {
    code: "AllowanceExhausted",
    message: "the amount would pass the subscription's overage cap for this cycle",
  },
  NotProviderOrOperator: {
    code: "InvalidRequest",
    message: "the facilitator is not an operator of this plan's provider",
    details: () => ({ reason: "not_operator" }),
  },
  NotDue: {
    code: "InvalidRequest",
    message: "the subscription is not due",
    details: () => ({ reason: "not_due" }),
  },
};

function statusText(value: unknown): string {
  try {
    return subscriptionStatusName(Number(value));
  } catch {
    return String(value);
  }
}

/** Maps an error from a simulation or write against the SubscriptionManager (or a token's permit). */
export function toManagerError(error: unknown): TollgateError {
  if (error instanceof TollgateError) return error;
  if (error instanceof BaseError) {
    const reverted = error.walk((e) => e instanceof ContractFunctionRevertedError);
    if (reverted instanceof ContractFunctionRevertedError && reverted.data !== undefined) {
      const mapping = byName[reverted.data.errorName];
      if (mapping !== undefined) {
        const args = (reverted.data.args ?? []) as readonly unknown[];
        return new TollgateError(mapping.code, mapping.message, {
          cause: error,
          details: { revert: reverted.data.errorName, ...mapping.details?.(args) },
        });
      }
    }
  }
  return toChainError(error);
}
