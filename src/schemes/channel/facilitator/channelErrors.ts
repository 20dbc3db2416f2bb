/**
 * Reverts of TollgateChannels (and of the token it calls) as Tollgate error codes. A simulation is
 * decoded against both ABIs, so a refused EIP-3009 authorization reads as the token's error.
 */
import { BaseError, ContractFunctionRevertedError } from "viem";
import { toChainError } from "../../../facilitator/chainErrors.ts";
import { type ErrorCode, TollgateError } from "../../../protocol/errors.ts";

const byName: Record<string, { code: ErrorCode; message: string }> = {
  ChannelExists: { code: "NonceAlreadyUsed", message: "this channel id was opened already" },
  ChannelNotFound: { code: "NotFound", message: "no such channel" },
  ChannelIsClosed: { code: "InvalidRequest", message: "the channel is closed" },
  CloseAlreadyRequested: { code: "InvalidRequest", message: "the payer already asked to close this channel" },
  InvalidTerms: {
    code: "InvalidRequest",
    message: "the channel terms are invalid (deposit, session key or close delay)",
  },
  DepositNotReceived: { code: "InvalidRequest", message: "the token did not deliver the deposit in full" },
  CloseNotRequested: { code: "InvalidRequest", message: "the payer has not asked to close this channel" },
  CloseDelayNotOver: { code: "InvalidRequest", message: "the close delay is not over yet" },
  SignatureExpired: { code: "AuthorizationExpired", message: "the signed request's deadline has passed" },
  InvalidSignature: { code: "InvalidSignature", message: "the signature is not the payer's" },
  InvalidVoucher: { code: "ChannelVoucherInvalid", message: "the contract refused the voucher" },
};

/** Maps a failed channel simulation or read to a `TollgateError` (chain faults become 503). */
export function toChannelError(error: unknown): TollgateError {
  if (error instanceof TollgateError) return error;
  if (error instanceof BaseError) {
    const reverted = error.walk((e) => e instanceof ContractFunctionRevertedError);
    const name = reverted instanceof ContractFunctionRevertedError ? reverted.data?.errorName : undefined;
    const known = name === undefined ? undefined : byName[name];
    if (known !== undefined) {
      return new TollgateError(known.code, known.message, { cause: error, details: { revert: name } });
    }
  }
  return toChainError(error);
}
