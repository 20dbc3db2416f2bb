import { describe, expect, it } from "vitest";
import { isTollgateError } from "../protocol/errors.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import type { Scheme } from "../schemes/types.ts";
import { type AgentSchemePart, createAgentSchemes } from "./agentScheme.ts";
import { agentSchemesWith, builtinAgentSchemes } from "./agentSchemes.ts";
import { checkPaymentRequired } from "./offerCheck.ts";
import { offerFromPaymentRequired } from "./policy/offerFromPaymentRequired.ts";

const PAY_TO = "0x2222222222222222222222222222222222222222";
const TOKEN = "0x4444444444444444444444444444444444444444";
const MEMO = `eyJ0IjoxfQ.${"A".repeat(43)}`;

/** A scheme the agent does not know built in: paid per call with a toy ticket, at most its `amount`. */
const toyAgent: AgentSchemePart = {
  offer: {
    check: (option) =>
      BigInt(option.amount) > 5000n ? { field: "price", listed: "5000", asked: option.amount } : undefined,
    policyTerms: (option) => ({ choice: "oneTime", terms: { amount: BigInt(option.amount) } }),
    spendMode: "one-time",
  },
};
const toy = { id: "toy", description: "a toy ticket", agent: toyAgent } as unknown as Scheme;

function body(amount: string): PaymentRequired {
  return PaymentRequiredSchema.parse({
    version: "1",
    error: "PaymentRequired",
    message: "pay",
    accepts: [{ scheme: "toy", network: "eip155:31337", token: TOKEN, amount, payTo: PAY_TO, memo: MEMO }],
  });
}

const listing = {
  seller: PAY_TO,
  payTo: PAY_TO,
  network: "eip155:31337",
  token: TOKEN,
  pricing: [],
  source: "manifest",
} as const;

describe("the agent's schemes", () => {
  it("looks the built-in parts up by option scheme and listed pricing type", () => {
    const schemes = agentSchemesWith(undefined);
    expect(schemes.offer("exact")?.spendMode).toBe("one-time");
    expect(schemes.offer("channel")?.spendMode).toBe("channel");
    expect(schemes.offer("metered")).toBeUndefined();
    expect(schemes.listing("metered")?.commits).toBe(true);
    expect(schemes.listing("one-time")?.commits).toBe(false);
    expect(schemes.x402Schemes).toEqual(["exact"]);
  });

  it("weighs and checks an extra scheme's options through the part it brings", () => {
    const schemes = agentSchemesWith([toy]);
    expect(offerFromPaymentRequired(body("4000"))).toBeUndefined();
    const view = offerFromPaymentRequired(body("4000"), { schemes });
    expect(view?.offer).toEqual({ provider: PAY_TO, oneTime: { amount: 4000n } });
    expect(view?.oneTimeOption?.scheme).toBe("toy");
    expect(checkPaymentRequired(body("4000"), listing, "t", schemes).accepts).toHaveLength(1);
    const refused = (() => {
      try {
        checkPaymentRequired(body("6000"), listing, "t", schemes);
      } catch (error) {
        return error;
      }
    })();
    expect(isTollgateError(refused, "OfferMismatch")).toBe(true);
  });

  it("refuses an extra scheme whose id or listed type is a built-in's", () => {
    expect(() => createAgentSchemes(builtinAgentSchemes, [{ ...toy, id: "exact" } as Scheme])).toThrow(
      /registered twice/,
    );
    const listed = { ...toy, agent: { listing: { ...builtinAgentSchemes[2]!.agent.listing! } } } as Scheme;
    expect(() => createAgentSchemes(builtinAgentSchemes, [listed])).toThrow(/listed by two schemes/);
  });
});
