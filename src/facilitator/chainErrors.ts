/**
 * Turns what the chain said into the error codes of docs/protocol.md, "Errors".
 *
 * Two sources: viem errors thrown by a call (an RPC that cannot be reached, or a revert during
 * simulation) and the raw revert bytes a BatchSettler item reports in `SettleFailed`. USDC's `Error(string)`
 * messages are named through `fiatTokenRevertName`; the devnet runs the same FiatToken v2.2 code as Base,
 * so the same codes come out on both.
 */
import {
  BaseError,
  ContractFunctionRevertedError,
  decodeErrorResult,
  type Hex,
  HttpRequestError,
  RpcRequestError,
  TimeoutError,
} from "viem";
import { batchSettlerAbi } from "../chain/contracts/artifacts/BatchSettler.ts";
import { fiatTokenRevertName } from "../chain/events/fiatTokenRevertNames.ts";
import { type ErrorCode, TollgateError } from "../protocol/errors.ts";

/** Seconds a client should wait before retrying when the chain cannot be reached. */
export const CHAIN_RETRY_AFTER_SECONDS = 5;

const byErrorName: Record<string, ErrorCode> = {
  AuthorizationAlreadyUsed: "NonceAlreadyUsed",
  ERC20InsufficientBalance: "InsufficientFunds",
  InvalidSignature: "InvalidSignature",
  AuthorizationExpired: "AuthorizationExpired",
  AuthorizationNotYetValid: "AuthorizationExpired",
  // BatchSettler: the item used all of its per-item gas (a payer's wallet that burns gas, say).
  ItemOutOfGas: "InvalidSignature",
  // USDC's blacklister refused the payer or the payee (blacklistRefusal.ts reads which).
  AccountBlacklisted: "AccountBlacklisted",
  // USDC's pauser stopped the token: nothing is wrong with the payment (tokenPauseWatch.ts holds it).
  TokenPaused: "TokenPaused",
};

/** BatchSettler's errors, which it reports for an item in place of the token's revert (USDC's is an `Error(string)`). */
const revertAbi = batchSettlerAbi.filter((item) => item.type === "error");

/** Seconds a payer is told to wait before trying again while the token is paused. */
export const TOKEN_PAUSED_RETRY_AFTER_SECONDS = 60;

const messages: Partial<Record<ErrorCode, string>> = {
  NonceAlreadyUsed: "this authorization's nonce was already used on chain",
  InsufficientFunds: "the payer's token balance is below the amount",
  InvalidSignature: "the token contract refused the signature",
  AuthorizationExpired: "the authorization is outside its validity window on chain",
  AccountBlacklisted: "the token's issuer blacklisted the payer or the payee; the token refuses the transfer",
  TokenPaused: "the token's issuer has paused it; payments settle once it is unpaused",
};

/** A refusal decoded from revert data, or `undefined` when the data is not recognised. */
export function decodeRevert(data: Hex | undefined): { code: ErrorCode; reason: string } | undefined {
  if (data === undefined || data === "0x") return undefined;
  try {
    // viem adds Solidity's built-in `Error(string)` and `Panic(uint256)` to the ABI it decodes with.
    const decoded = decodeErrorResult({ abi: revertAbi, data });
    const name: string = decoded.errorName;
    const args = decoded.args as readonly unknown[] | undefined;
    const code = byErrorName[name];
    if (code !== undefined) return { code, reason: name };
    if (name === "Error" && typeof args?.[0] === "string") return fromMessage(args[0]);
    return { code: "InvalidRequest", reason: name };
  } catch {
    return undefined;
  }
}

/** A FiatToken (USDC) `Error(string)` message, through its name in `fiatTokenRevertName`. */
function fromMessage(message: string): { code: ErrorCode; reason: string } {
  const name = fiatTokenRevertName(message);
  return { code: (name !== undefined ? byErrorName[name] : undefined) ?? "InvalidRequest", reason: message };
}

/** True when the error says the RPC endpoint could not be reached or did not answer. */
export function isChainUnreachable(error: unknown): boolean {
  if (!(error instanceof BaseError)) {
    return (
      error instanceof Error && /ECONNREFUSED|fetch failed|socket hang up|ECONNRESET/i.test(error.message)
    );
  }
  return (
    error.walk((e) => e instanceof HttpRequestError || e instanceof TimeoutError) !== null ||
    (error.walk((e) => e instanceof RpcRequestError) === null &&
      /fetch failed|ECONNREFUSED/i.test(error.message))
  );
}

export function chainUnavailable(cause: unknown): TollgateError {
  return new TollgateError("ChainUnavailable", "the chain RPC cannot be reached; try again shortly", {
    cause,
    retryAfter: CHAIN_RETRY_AFTER_SECONDS,
  });
}

/** Maps an error thrown by a simulation or a read to a `TollgateError`. */
export function toChainError(error: unknown): TollgateError {
  if (error instanceof TollgateError) return error;
  if (isChainUnreachable(error)) return chainUnavailable(error);
  if (error instanceof BaseError) {
    const reverted = error.walk((e) => e instanceof ContractFunctionRevertedError);
    if (reverted instanceof ContractFunctionRevertedError) {
      // USDC's `Error(string)` is named by its message (`reason`), as decodeRevert names a batch item's.
      const name = reverted.data?.errorName === "Error" ? undefined : reverted.data?.errorName;
      const code =
        (name !== undefined ? byErrorName[name] : undefined) ??
        (reverted.reason !== undefined ? fromMessage(reverted.reason).code : undefined) ??
        "InvalidRequest";
      return new TollgateError(
        code,
        messages[code] ?? `the chain refused the transfer: ${name ?? reverted.reason}`,
        {
          cause: error,
          details: { revert: name ?? reverted.reason ?? "unknown" },
          ...(code === "TokenPaused" ? { retryAfter: TOKEN_PAUSED_RETRY_AFTER_SECONDS } : {}),
        },
      );
    }
  }
  return chainUnavailable(error);
}

export function refusalFromRevert(data: Hex | undefined): TollgateError {
  const decoded = decodeRevert(data);
  const code = decoded?.code ?? "InvalidRequest";
  return new TollgateError(code, messages[code] ?? "the chain refused the transfer", {
    details: { revert: decoded?.reason ?? data ?? "unknown" },
  });
}
