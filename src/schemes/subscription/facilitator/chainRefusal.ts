/**
 * Telling "the chain refuses this call" from "the chain could not be asked", for the workers that split
 * a batch to find the item that makes it revert (the renewal keeper, the usage settler). Splitting on
 * any other error would set aside healthy items because an RPC hiccupped, so anything that is not
 * recognisably a refusal is left to the caller to throw.
 */
import { BaseError, ContractFunctionRevertedError, ExecutionRevertedError } from "viem";
import { TollgateError } from "../../../protocol/errors.ts";

/** True when `error` says the call reverts or cannot fit in the gas a block allows. */
export function isChainRefusal(error: unknown): boolean {
  if (error instanceof TollgateError) {
    // The gas account's "transaction … reverted on chain" (a mined revert), or its wrapping of a
    // refused estimate, whose cause says which.
    if (typeof error.details?.transaction === "string") return true;
    return error.cause !== undefined && isChainRefusal(error.cause);
  }
  if (!(error instanceof BaseError)) return false;
  if (error.walk((e) => e instanceof ExecutionRevertedError || e instanceof ContractFunctionRevertedError)) {
    return true;
  }
  return /execution reverted|out of gas|gas required exceeds/i.test(`${error.message} ${error.details}`);
}
