import { verifyTypedData } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import {
  pauseIntentTypes,
  permitTypes,
  subscribeIntentTypes,
  subscriptionManagerDomain,
} from "../../../chain/signers/eip712Types.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import type { SupportedResponse } from "../../../protocol/facilitator.ts";
import type { PlanInfo, SubscriberInfo, SubscriptionInfo } from "../../../protocol/subscriptions.ts";
import {
  changeSubscriptionThroughFacilitator,
  DEFAULT_APPROVAL_CYCLES,
  subscribeThroughFacilitator,
} from "./facilitatorSubscriptions.ts";

const manager = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const token = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512";
const provider = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const chainId = 31337;

const supported: SupportedResponse = {
  version: "1",
  schemes: ["exact", "subscription"],
  networks: [
    {
      network: "eip155:31337",
      tokens: [{ address: token, symbol: "USDC", decimals: 6, eip712: { name: "USD Coin", version: "2" } }],
      subscriptionManager: manager,
    },
  ],
};

const plan: PlanInfo = {
  planId: "3",
  provider,
  token,
  amount: "9000000",
  interval: 2_592_000,
  includedUnits: "1000",
  overageUnitPrice: "1000",
  deprecated: false,
  successorPlanId: null,
};

const subscription: SubscriptionInfo = {
  subscriptionId: "7",
  planId: "3",
  subscriber: provider,
  provider,
  token,
  amount: "9000000",
  interval: 2_592_000,
  status: "Active",
  createdAt: 1,
  periodStart: 1,
  currentPeriodEnd: 2,
  nextChargeAt: 2,
  pausedRemaining: 0,
  maxOverage: "0",
  overageUsed: "0",
  chainTime: 1,
};

/** A facilitator that answers from fixtures and records what was sent to it. */
function fakeFacilitator(allowance: string) {
  const sent: { method: string; path: string; body: unknown }[] = [];
  const client: Pick<FacilitatorClient, "request" | "supported"> = {
    supported: async () => supported,
    async request<T>(method: string, path: string, schema: z.ZodType<T>, options?: { body?: unknown }) {
      sent.push({ method, path, body: options?.body });
      const subscriber = (path.split("/")[2]?.split("?")[0] ?? "") as `0x${string}`;
      let reply: unknown;
      if (path === "/plans/3") reply = plan;
      else if (path.startsWith("/subscribers/")) {
        reply = {
          subscriber,
          intentNonce: "4",
          chainTime: 1_800_000_000,
          manager,
          token: { address: token, permitNonce: "2", allowance, balance: "50000000" },
          subscriptions: [],
        } satisfies SubscriberInfo;
      } else if (path === "/subscriptions") {
        reply = { subscriptionId: "7", transaction: `0x${"ab".repeat(32)}`, subscription };
      } else if (path === "/subscriptions/7/pause") {
        reply = { subscriptionId: "7", action: "pause", transaction: `0x${"cd".repeat(32)}`, subscription };
      } else throw new Error(`unexpected ${method} ${path}`);
      return schema.parse(reply);
    },
  };
  return { client, sent };
}

describe("subscribeThroughFacilitator", () => {
  it("signs an intent with the facilitator's nonce and chain time, and a permit when the allowance is short", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { client, sent } = fakeFacilitator("0");
    const result = await subscribeThroughFacilitator(client, account, { planId: 3n, maxOverage: 2_000_000n });
    expect(result.subscriptionId).toBe("7");
    const body = sent.find((s) => s.path === "/subscriptions")?.body as {
      subscriber: `0x${string}`;
      deadline: string;
      signature: `0x${string}`;
      permit: { value: string; deadline: string; signature: `0x${string}` };
    };
    expect(body.subscriber).toBe(account.address);
    expect(body.deadline).toBe(String(1_800_000_000 + 600));
    expect(
      await verifyTypedData({
        address: account.address,
        domain: subscriptionManagerDomain(chainId, manager),
        types: subscribeIntentTypes,
        primaryType: "Subscribe",
        message: {
          subscriber: account.address,
          planId: 3n,
          maxOverage: 2_000_000n,
          spendLimit: 2n ** 256n - 1n,
          nonce: 4n,
          deadline: BigInt(body.deadline),
        },
        signature: body.signature,
      }),
    ).toBe(true);
    expect(body.permit.value).toBe(String((9_000_000n + 2_000_000n) * DEFAULT_APPROVAL_CYCLES));
    expect(
      await verifyTypedData({
        address: account.address,
        domain: { name: "USD Coin", version: "2", chainId, verifyingContract: token },
        types: permitTypes,
        primaryType: "Permit",
        message: {
          owner: account.address,
          spender: manager,
          value: BigInt(body.permit.value),
          nonce: 2n,
          deadline: BigInt(body.permit.deadline),
        },
        signature: body.permit.signature,
      }),
    ).toBe(true);
  });

  it("sends no permit when the manager may already pull a period and the overage cap", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { client, sent } = fakeFacilitator("11000000");
    await subscribeThroughFacilitator(client, account, { planId: 3n, maxOverage: 2_000_000n });
    const body = sent.find((s) => s.path === "/subscriptions")?.body as Record<string, unknown>;
    expect(body.permit).toBeUndefined();
  });
});

describe("changeSubscriptionThroughFacilitator", () => {
  it("signs a Pause intent for the subscription with the current nonce", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { client, sent } = fakeFacilitator("0");
    await changeSubscriptionThroughFacilitator(client, account, { subscriptionId: 7n, action: "pause" });
    const body = sent.find((s) => s.path === "/subscriptions/7/pause")?.body as {
      deadline: string;
      signature: `0x${string}`;
    };
    expect(
      await verifyTypedData({
        address: account.address,
        domain: subscriptionManagerDomain(chainId, manager),
        types: pauseIntentTypes,
        primaryType: "Pause",
        message: { subscriptionId: 7n, nonce: 4n, deadline: BigInt(body.deadline) },
        signature: body.signature,
      }),
    ).toBe(true);
  });
});
