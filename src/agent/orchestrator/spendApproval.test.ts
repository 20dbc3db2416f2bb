import { describe, expect, it } from "vitest";
import type { ApprovalRequest } from "../budget/createBudgetLedger.ts";
import { approvalHook, withSpendGrant } from "./spendApproval.ts";

const A = "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const ask = (amount: bigint, hold?: bigint): ApprovalRequest => ({
  agent: "researcher",
  amount,
  provider: A,
  kind: "subscription",
  ref: "plan:3",
  ...(hold === undefined ? {} : { hold }),
});

describe("approvalHook inside a call's grant", () => {
  it("covers a subscription's one question when its first period and its hold are each within the grant", async () => {
    const hook = approvalHook();
    const within = (request: ApprovalRequest) =>
      withSpendGrant({ callId: "c1", upTo: 100_000n }, () => hook(request));
    expect(await within(ask(200_000n, 100_000n))).toBe(true);
    expect(await within(ask(150_000n, 50_000n))).toBe(true);
    // A first period or a hold above what was approved is refused.
    expect(await within(ask(250_000n, 100_000n))).toBe(false);
    expect(await within(ask(250_000n, 150_000n))).toBe(false);
    expect(await within(ask(100_001n))).toBe(false);
    // Outside a grant, without a fallback: refused.
    expect(await hook(ask(1n))).toBe(false);
  });
});
