import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { subscriptionCommitment } from "./subscriptionCommitment.ts";

describe("subscriptionCommitment", () => {
  it("holds this period's cap, the next renewal and its cap when the room allows", () => {
    expect(
      subscriptionCommitment({
        price: 50_000n,
        desiredCap: 20_000n,
        overageUnitPrice: 2_000n,
        room: 1_000_000n,
      }),
    ).toEqual({ cap: 20_000n, renews: true, hold: 90_000n, approval: 140_000n });
  });

  it("holds one period with the cap the room leaves when two do not fit (the review's 0.10 per provider)", () => {
    expect(
      subscriptionCommitment({
        price: 50_000n,
        desiredCap: 20_000n,
        overageUnitPrice: 2_000n,
        room: 100_000n,
      }),
    ).toEqual({ cap: 20_000n, renews: false, hold: 20_000n, approval: 70_000n });
    expect(
      subscriptionCommitment({
        price: 50_000n,
        desiredCap: 20_000n,
        overageUnitPrice: 2_000n,
        room: 60_000n,
      }),
    ).toEqual({ cap: 10_000n, renews: false, hold: 10_000n, approval: 60_000n });
  });

  it("shrinks the cap to what every limit leaves rather than give up the renewal", () => {
    expect(
      subscriptionCommitment({
        price: 10_000n,
        desiredCap: 100_000n,
        overageUnitPrice: 1_000n,
        room: 60_000n,
      }),
    ).toEqual({ cap: 20_000n, renews: true, hold: 50_000n, approval: 60_000n });
  });

  it("refuses a plan whose first period the room cannot pay", () => {
    expect(
      subscriptionCommitment({ price: 50_000n, desiredCap: 0n, overageUnitPrice: 0n, room: 49_999n }),
    ).toBe(undefined);
  });

  it("never approves more than the room, and the approval is the first period plus the hold", () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 1n, max: 10n ** 9n }),
        fc.bigInt({ min: 0n, max: 10n ** 9n }),
        fc.bigInt({ min: 0n, max: 10n ** 7n }),
        fc.option(fc.bigInt({ min: 0n, max: 10n ** 10n }), { nil: undefined }),
        (price, desiredCap, overageUnitPrice, room) => {
          const c = subscriptionCommitment({ price, desiredCap, overageUnitPrice, room });
          if (c === undefined) {
            expect(room !== undefined && room < price).toBe(true);
            return;
          }
          expect(c.approval).toBe(price + c.hold);
          expect(c.hold).toBe(c.renews ? 2n * c.cap + price : c.cap);
          expect(c.cap <= desiredCap).toBe(true);
          if (room !== undefined) expect(c.approval <= room).toBe(true);
        },
      ),
    );
  });
});
