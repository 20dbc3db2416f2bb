import { encodeErrorResult, getAddress, parseAbi } from "viem";
import { describe, expect, it } from "vitest";
import { subscriptionManagerAbi } from "../../chain/contracts/artifacts/SubscriptionManager.ts";
import { describeFailureMessage, describeRevert } from "./revertReason.ts";

const payer = getAddress("0x00000000000000000000000000000000000000aa");

describe("describeRevert", () => {
  it("names an OpenZeppelin ERC-20 error with its arguments", () => {
    const data = encodeErrorResult({
      abi: parseAbi(["error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)"]),
      errorName: "ERC20InsufficientBalance",
      args: [payer, 5n, 1_000_000n],
    });
    expect(data.startsWith("0xe450d38c")).toBe(true);
    expect(describeRevert(data)).toBe(`ERC20InsufficientBalance(${payer}, 5, 1000000)`);
  });

  it("shows Circle USDC's Error(string) with its message", () => {
    const data = encodeErrorResult({
      abi: parseAbi(["error Error(string)"]),
      errorName: "Error",
      args: ["ERC20: transfer amount exceeds balance"],
    });
    expect(describeRevert(data)).toBe('Error("ERC20: transfer amount exceeds balance")');
  });

  it("names the SubscriptionManager's own errors", () => {
    const data = encodeErrorResult({
      abi: subscriptionManagerAbi,
      errorName: "NotDue",
      args: [7n, 1_800_000_000n],
    });
    expect(describeRevert(data)).toBe("NotDue(7, 1800000000)");
  });

  it("falls back to the hex for data no ABI knows, and says so for empty data", () => {
    expect(describeRevert("0xdeadbeef00")).toBe("0xdeadbeef00");
    expect(describeRevert("0x")).toBe("reverted without a reason (0x)");
    expect(describeRevert("not hex")).toBe("not hex");
  });

  it("decodes the revert data a failure message quotes", () => {
    const data = encodeErrorResult({
      abi: parseAbi(["error ERC20InvalidReceiver(address receiver)"]),
      errorName: "ERC20InvalidReceiver",
      args: [payer],
    });
    expect(describeFailureMessage(`the chain refused the renewal (revert data ${data})`)).toBe(
      `the chain refused the renewal (revert ERC20InvalidReceiver(${payer}))`,
    );
    expect(describeFailureMessage("the payer's token balance is below the amount")).toBe(
      "the payer's token balance is below the amount",
    );
  });
});
