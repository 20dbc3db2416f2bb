import { describe, expect, it } from "vitest";
import type { SupportedResponse } from "../../protocol/facilitator.ts";
import { checkSettleableAmounts } from "./checkSettleableAmounts.ts";

const USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const served = { network: "eip155:84532", token: USDC.toLowerCase(), decimals: 6 } as const;

/** A Base Sepolia facilitator's `/supported`, with the default minimum of 0.01 USDC (or none). */
function supported(minAmount: string | undefined, minAmountFloor?: string): SupportedResponse {
  return {
    version: "1",
    schemes: ["exact"],
    networks: [
      {
        network: "eip155:84532",
        tokens: [
          {
            address: USDC,
            symbol: "USDC",
            decimals: 6,
            eip712: { name: "USDC", version: "2" },
            ...(minAmount === undefined ? {} : { minAmount }),
            ...(minAmountFloor === undefined ? {} : { minAmountFloor }),
          },
        ],
        batchSettler: "0x0000000000000000000000000000000000000b01",
        signers: [],
      },
    ],
  };
}

describe("checkSettleableAmounts", () => {
  it("accepts prices at or above the facilitator's minimum, and any price when it publishes none", () => {
    expect(() => checkSettleableAmounts(supported("10000"), served, [10_000n, 500_000n])).not.toThrow();
    expect(() => checkSettleableAmounts(supported(undefined), served, [1n])).not.toThrow();
  });

  it("refuses a price the facilitator would refuse at every payment, naming it and the minimum", () => {
    let error: unknown;
    try {
      checkSettleableAmounts(supported("10000"), served, [5_000n, 20_000n]);
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({
      code: "InvalidRequest",
      message: expect.stringMatching(
        /one-time price 0\.005 is below the facilitator's minimum payment of 0\.01 on eip155:84532/,
      ),
      details: { minAmount: "10000", amounts: ["5000"] },
    });
  });

  it("refuses only a price under the configured floor when the network's fee raised the minimum, and names the rest", () => {
    // The fee raised the minimum to 0.05 USDC over a floor of 0.01: 0.02 is refused for now, not for good.
    expect(checkSettleableAmounts(supported("50000", "10000"), served, [20_000n, 80_000n])).toEqual({
      minAmount: 50_000n,
      belowNow: [20_000n],
    });
    expect(checkSettleableAmounts(supported("50000", "10000"), served, [50_000n])).toBeUndefined();
    expect(() => checkSettleableAmounts(supported("50000", "10000"), served, [5_000n])).toThrow(
      /one-time price 0\.005 is below the facilitator's minimum payment of 0\.01/,
    );
  });

  it("refuses a token or network the facilitator does not settle", () => {
    expect(() =>
      checkSettleableAmounts(
        supported("10000"),
        { ...served, token: "0x5FbDB2315678afecb367f032d93F642f64180aa3" },
        [20_000n],
      ),
    ).toThrow(/does not settle the token 0x5FbDB2315678afecb367f032d93F642f64180aa3 on eip155:84532/);
    expect(() =>
      checkSettleableAmounts(supported("10000"), { ...served, network: "eip155:8453" }, [20_000n]),
    ).toThrow(/does not settle/);
  });
});
