import { recoverMessageAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { isTollgateError } from "./errors.ts";
import { formatPayerAuth, isFreshPayerAuth, parsePayerAuth, payerReadMessage } from "./payerReadAuth.ts";

const account = privateKeyToAccount(`0x${"11".repeat(32)}`);
const NONCE = `0x${"ab".repeat(32)}`;

describe("payer read auth", () => {
  it("round-trips a header whose signature recovers the payer over method, path and time", async () => {
    const message = payerReadMessage({ method: "get", path: `/payments/${NONCE}`, t: 1_763_800_000 });
    expect(message).toBe(`Tollgate payer read\nGET /payments/${NONCE}\nTime: 1763800000`);
    const header = formatPayerAuth(1_763_800_000, await account.signMessage({ message }));
    const { t, signature } = parsePayerAuth(header);
    expect(t).toBe(1_763_800_000);
    expect(await recoverMessageAddress({ message, signature })).toBe(account.address);
  });

  it.each([
    ["no separator", `1763800000${"0".repeat(132)}`],
    ["a short signature", "1763800000.0x1234"],
    ["a non-numeric time", `soon.0x${"1".repeat(130)}`],
    ["an empty value", ""],
  ])("refuses %s with Unauthorized", (_what, value) => {
    expect(() => parsePayerAuth(value)).toThrow();
    try {
      parsePayerAuth(value);
    } catch (error) {
      expect(isTollgateError(error, "Unauthorized")).toBe(true);
    }
  });

  it("accepts a time up to 60 s old and 30 s ahead, nothing outside", () => {
    const now = 1_763_800_000;
    expect(isFreshPayerAuth(now, now)).toBe(true);
    expect(isFreshPayerAuth(now - 60, now)).toBe(true);
    expect(isFreshPayerAuth(now - 61, now)).toBe(false);
    expect(isFreshPayerAuth(now + 30, now)).toBe(true);
    expect(isFreshPayerAuth(now + 31, now)).toBe(false);
  });
});
