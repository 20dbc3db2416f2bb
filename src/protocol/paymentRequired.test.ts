import { describe, expect, it } from "vitest";
import {
  type PaymentOption,
  PaymentRequiredSchema,
  PlanTermsSchema,
  planTermsOf,
} from "./paymentRequired.ts";

const MEMO = `e30.${"A".repeat(43)}`;
const TOKEN = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
const PAY_TO = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const MANAGER = "0xe7f1725e7734ce288f8367e1bb143e90bb3f0512";

/** The example body of docs/protocol.md, "402 body", with concrete addresses and memos. */
const body = {
  version: "1",
  error: "PaymentRequired",
  message: "This endpoint costs 0.50 USDC per call or 9 USDC per month.",
  accepts: [
    {
      scheme: "exact",
      network: "eip155:31337",
      token: TOKEN,
      amount: "500000",
      payTo: PAY_TO,
      memo: MEMO,
      tollgate: { planId: "3", subscriptionScheme: true, facilitator: "http://127.0.0.1:4020" },
    },
    {
      scheme: "subscription",
      network: "eip155:31337",
      token: TOKEN,
      amount: "9000000",
      payTo: PAY_TO,
      memo: MEMO,
      tollgate: {
        planId: "3",
        interval: 2592000,
        subscriptionScheme: true,
        facilitator: "http://127.0.0.1:4020",
        manager: MANAGER,
        overage: { unitPrice: "1000", includedUnits: 1000 },
      },
    },
  ],
};

describe("PaymentRequiredSchema", () => {
  it("accepts the documented 402 body and checksums its addresses", () => {
    const parsed = PaymentRequiredSchema.parse(body);
    expect(parsed.accepts[0]?.token).toBe("0x5FbDB2315678afecb367f032d93F642f64180aa3");
    expect(parsed.accepts[1]?.tollgate?.manager).toBe("0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512");
  });

  it("reads an option of a scheme it does not know, with its extra terms, for clients to skip or pay", () => {
    const channel = {
      ...body.accepts[0],
      scheme: "channel",
      extra: { escrow: "0xabc", minDeposit: "1000000" },
    };
    const parsed = PaymentRequiredSchema.parse({ ...body, accepts: [channel] });
    expect(parsed.accepts[0]?.scheme).toBe("channel");
    expect(parsed.accepts[0]?.extra).toEqual({ escrow: "0xabc", minDeposit: "1000000" });
  });

  it("refuses scheme terms nested too deep to write back, without throwing", () => {
    let nested: Record<string, unknown> = {};
    for (let i = 0; i < 200_000; i++) nested = { a: nested };
    const parsed = PaymentRequiredSchema.safeParse({
      ...body,
      accepts: [{ ...body.accepts[0], extra: nested }],
    });
    expect(parsed.success).toBe(false);
  });

  it("derives the plan terms from the subscription option", () => {
    const [exact, subscription] = PaymentRequiredSchema.parse(body).accepts as [PaymentOption, PaymentOption];
    expect(planTermsOf(exact)).toBeUndefined();
    const terms = planTermsOf(subscription);
    expect(terms).toEqual({
      planId: "3",
      amount: "9000000",
      interval: 2592000,
      token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
      includedUnits: 1000,
      overageUnitPrice: "1000",
      payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      network: "eip155:31337",
      manager: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
    });
    expect(PlanTermsSchema.parse(terms)).toEqual(terms);
  });

  it("gives a plan without metering zero included units and a zero unit price", () => {
    const option = PaymentRequiredSchema.parse({
      ...body,
      accepts: [{ ...body.accepts[1], tollgate: { ...body.accepts[1]?.tollgate, overage: undefined } }],
    }).accepts[0]!;
    expect(planTermsOf(option)).toMatchObject({ includedUnits: 0, overageUnitPrice: "0" });
  });

  it.each(["planId", "interval", "manager"])("refuses a subscription option without tollgate.%s", (key) => {
    const tollgate: Record<string, unknown> = { ...body.accepts[1]?.tollgate };
    delete tollgate[key];
    const result = PaymentRequiredSchema.safeParse({ ...body, accepts: [{ ...body.accepts[1], tollgate }] });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["accepts", 0, "tollgate", key]);
  });

  it.each([
    ["an error that is not a gate code", { ...body, error: "InsufficientFunds" }],
    ["no options", { ...body, accepts: [] }],
    ["another version", { ...body, version: "2" }],
    ["a scheme that is no scheme id", { ...body, accepts: [{ ...body.accepts[0], scheme: "Up To!" }] }],
    [
      "oversized scheme terms",
      { ...body, accepts: [{ ...body.accepts[0], extra: { pad: "x".repeat(5000) } }] },
    ],
    ["a fractional amount", { ...body, accepts: [{ ...body.accepts[0], amount: "0.5" }] }],
    [
      "a non-http facilitator",
      {
        ...body,
        accepts: [
          {
            ...body.accepts[0],
            tollgate: { ...body.accepts[0]?.tollgate, facilitator: "file:///etc/passwd" },
          },
        ],
      },
    ],
    [
      "a fractional interval",
      {
        ...body,
        accepts: [{ ...body.accepts[1], tollgate: { ...body.accepts[1]?.tollgate, interval: 1.5 } }],
      },
    ],
  ])("refuses %s", (_name, value) => {
    expect(PaymentRequiredSchema.safeParse(value).success).toBe(false);
  });
});
