import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { TollgateError } from "./errors.ts";
import { BASE, BASE_SEPOLIA, chainIdOf, DEVNET, isNetwork, NetworkSchema, networkOf } from "./network.ts";

describe("networks", () => {
  it("names the three networks Tollgate settles on", () => {
    expect([DEVNET, BASE_SEPOLIA, BASE]).toEqual(["eip155:31337", "eip155:84532", "eip155:8453"]);
    expect([DEVNET, BASE_SEPOLIA, BASE].map(chainIdOf)).toEqual([31337, 84532, 8453]);
  });

  it("round-trips every positive safe chain id", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), (chainId) => {
        const network = networkOf(chainId);
        expect(NetworkSchema.parse(network)).toBe(network);
        expect(chainIdOf(network)).toBe(chainId);
      }),
      { numRuns: 1000 },
    );
  });

  it.each([
    "eip155:0",
    "eip155:01",
    "eip155:-1",
    "eip155:1.5",
    "eip155:1e3",
    "eip155:",
    "EIP155:1",
    "solana:mainnet",
    "8453",
    "eip155:9007199254740993",
    " eip155:1",
  ])("refuses %j", (text) => {
    expect(NetworkSchema.safeParse(text).success).toBe(false);
    expect(isNetwork(text)).toBe(false);
    expect(() => chainIdOf(text)).toThrow(expect.objectContaining({ code: "UnsupportedNetwork" }));
  });

  it("refuses chain ids that are not positive safe integers", () => {
    for (const id of [0, -1, 1.5, Number.NaN, 2 ** 53]) {
      expect(() => networkOf(id)).toThrow(TollgateError);
    }
  });

  it("answers arbitrary strings with a network or UnsupportedNetwork", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.string().map((s) => `eip155:${s}`),
        ),
        (text) => {
          try {
            const id = chainIdOf(text);
            expect(text).toBe(`eip155:${id}`);
          } catch (error) {
            expect(error).toMatchObject({ code: "UnsupportedNetwork" });
          }
        },
      ),
      { numRuns: 2000 },
    );
  });
});
