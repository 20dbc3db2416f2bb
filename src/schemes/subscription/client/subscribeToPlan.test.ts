import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import type { PlanInfo } from "../../../protocol/subscriptions.ts";
import { parseTokenAmount, subscribeToPlan } from "./subscribeToPlan.ts";

const plan: PlanInfo = {
  planId: "3",
  provider: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
  amount: "9000000",
  interval: 2_592_000,
  includedUnits: "0",
  overageUnitPrice: "0",
  deprecated: false,
  successorPlanId: null,
};

/** A facilitator that knows one plan and records every request; anything but the plan read fails. */
function facilitatorWith(info: PlanInfo) {
  const requests: string[] = [];
  const client: Pick<FacilitatorClient, "request" | "supported"> = {
    async request(method, path, schema) {
      requests.push(`${method} ${path}`);
      if (method === "GET" && path === `/plans/${info.planId}`) return schema.parse(info);
      throw new TollgateError("NotFound", `unexpected ${method} ${path}`);
    },
    async supported() {
      requests.push("GET /supported");
      throw new TollgateError("ChainUnavailable", "not in this test");
    },
  };
  return { client, requests };
}

const signer = privateKeyToAccount(generatePrivateKey());

describe("parseTokenAmount", () => {
  it("converts token text exactly and takes bigints as smallest units", () => {
    expect(parseTokenAmount("2.50", "maxOverage")).toBe(2_500_000n);
    expect(parseTokenAmount("0.000001", "maxOverage")).toBe(1n);
    expect(parseTokenAmount("0", "maxOverage")).toBe(0n);
    expect(parseTokenAmount(7n, "maxOverage")).toBe(7n);
  });

  it.each([["1.0000001"], [-1n], ["-1"], ["1e3"], [0.0000005], [null as unknown as string]])(
    "refuses %s",
    (value) => {
      expect(() => parseTokenAmount(value, "maxOverage")).toThrow(TollgateError);
    },
  );
});

describe("subscribeToPlan", () => {
  it("refuses a deprecated plan with PlanDeprecated naming the successor, before signing or relaying", async () => {
    const { client, requests } = facilitatorWith({ ...plan, deprecated: true, successorPlanId: "4" });
    const error = await subscribeToPlan(
      { signer, network: "eip155:31337", facilitator: client },
      { planId: 3n },
    ).catch((e: unknown) => e);
    expect(isTollgateError(error, "PlanDeprecated")).toBe(true);
    expect((error as TollgateError).details).toMatchObject({ successorPlanId: "4" });
    expect(requests).toEqual(["GET /plans/3"]);
  });

  it("needs a wallet client to subscribe directly", async () => {
    const { client, requests } = facilitatorWith(plan);
    await expect(
      subscribeToPlan(
        { signer, network: "eip155:31337", facilitator: client },
        { planId: "3", direct: true },
      ),
    ).rejects.toThrow(/walletClient/);
    expect(requests).toEqual(["GET /plans/3"]);
  });

  it("refuses a plan id that is not decimal and an inexact overage cap without asking anyone", async () => {
    const { client, requests } = facilitatorWith(plan);
    const context = { signer, network: "eip155:31337" as const, facilitator: client };
    await expect(subscribeToPlan(context, { planId: "0x3" })).rejects.toThrow(/decimal/);
    await expect(subscribeToPlan(context, { planId: 3n, maxOverage: "0.0000001" })).rejects.toThrow(
      TollgateError,
    );
    expect(requests).toEqual([]);
  });

  it.each([
    ["a price ceiling below the plan's price", { maxPrice: "8.99" }, "PriceCeilingExceeded"],
    [
      "an offer naming another payee",
      {
        offer: {
          payTo: "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
          token: plan.token,
          amount: plan.amount,
        },
      },
      "InvalidRequest",
    ],
    [
      "an offer in another token",
      {
        offer: {
          payTo: plan.provider,
          token: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
          amount: plan.amount,
        },
      },
      "InvalidRequest",
    ],
    [
      "an offer cheaper than the plan on chain",
      { offer: { payTo: plan.provider, token: plan.token, amount: "1000000" } },
      "InvalidRequest",
    ],
  ] as const)("refuses %s after reading the plan, before signing or relaying", async (_name, extra, code) => {
    const { client, requests } = facilitatorWith(plan);
    const error = await subscribeToPlan(
      { signer, network: "eip155:31337", facilitator: client },
      { planId: 3, maxOverage: 2, ...extra },
    ).catch((e: unknown) => e);
    expect(isTollgateError(error, code)).toBe(true);
    expect(requests).toEqual(["GET /plans/3"]);
  });
});
