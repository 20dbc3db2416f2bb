import { concat, keccak256, size, slice, stringToHex } from "viem";
import { describe, expect, it } from "vitest";
import {
  deterministicAddress,
  deterministicCalldata,
  deterministicDeployer,
  tollgateSalt,
} from "./deterministicAddress.ts";

describe("deterministicAddress", () => {
  it("is the last 20 bytes of keccak256(0xff ++ proxy ++ salt ++ keccak256(initcode))", () => {
    const initcode = "0x600a600c600039600a6000f3602a60005260206000f3" as const;
    const salt = `0x${"00".repeat(31)}01` as const;
    const hash = keccak256(concat(["0xff", deterministicDeployer, salt, keccak256(initcode)]));
    expect(deterministicAddress({ initcode, salt }).toLowerCase()).toBe(slice(hash, 12).toLowerCase());
  });

  it('uses keccak256("tollgate") as the default salt, and puts it before the initcode in the calldata', () => {
    expect(tollgateSalt).toBe(keccak256(stringToHex("tollgate")));
    const initcode = "0x6001" as const;
    expect(deterministicAddress({ initcode })).toBe(deterministicAddress({ initcode, salt: tollgateSalt }));
    const data = deterministicCalldata({ initcode });
    expect(size(data)).toBe(34);
    expect(slice(data, 0, 32)).toBe(tollgateSalt);
  });
});
