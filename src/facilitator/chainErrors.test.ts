import { encodeErrorResult } from "viem";
import { describe, expect, it } from "vitest";
import { batchSettlerAbi } from "../chain/contracts/artifacts/BatchSettler.ts";
import { refusalFromRevert } from "./chainErrors.ts";

describe("refusalFromRevert", () => {
  it("reports an item that used all of BatchSettler's per-item gas as the payer's signature refused", () => {
    const data = encodeErrorResult({ abi: batchSettlerAbi, errorName: "ItemOutOfGas", args: [150_000n] });
    const refusal = refusalFromRevert(data);
    expect(refusal.code).toBe("InvalidSignature");
    expect(refusal.details).toEqual({ revert: "ItemOutOfGas" });
  });
});
