import { ErrorCode, TollgateError } from "../protocol/errors.ts";

/** A `tx` handle kept and used after its transaction committed or rolled back. */
export function transactionEndedError(): TollgateError {
  return new TollgateError(ErrorCode.Internal, "transaction handle used after its transaction ended");
}

export function noSchemaError(): TollgateError {
  return new TollgateError(ErrorCode.Internal, "dropSchema() needs a store opened with a schema");
}
