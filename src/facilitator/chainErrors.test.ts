import { BaseError, ContractFunctionRevertedError, encodeErrorResult } from "viem";
import { describe, expect, it } from "vitest";
import { batchSettlerAbi } from "../chain/contracts/artifacts/BatchSettler.ts";
import { refusalFromRevert, toChainError } from "./chainErrors.ts";

describe("refusalFromRevert", () => {
  it("reports an item that used all of BatchSettler's per-item gas as the payer's signature refused", () => {
    const data = encodeErrorResult({ abi: batchSettlerAbi, errorName: "ItemOutOfGas", args: [150_000n] });
    const refusal = refusalFromRevert(data);
    expect(refusal.code).toBe("InvalidSignature");
    expect(refusal.details).toEqual({ revert: "ItemOutOfGas" });
  });
});

describe("toChainError", () => {
  it("names a simulation's USDC revert by its message, so a not-yet-valid authorization is told apart", () => {
    const message = "FiatTokenV2: authorization is not yet valid";
    const data = encodeErrorResult({
      abi: [{ type: "error", name: "Error", inputs: [{ name: "message", type: "string" }] }],
      errorName: "Error",
      args: [message],
    });
    const reverted = new ContractFunctionRevertedError({
      abi: [],
      data,
      functionName: "transferWithAuthorization",
    });
    const refusal = toChainError(new BaseError("simulation reverted", { cause: reverted }));
    expect(refusal.code).toBe("AuthorizationExpired");
    expect(refusal.details).toEqual({ revert: message });
  });
});
