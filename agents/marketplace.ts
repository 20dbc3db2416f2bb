/**
 * The demo marketplace: five specialist sellers on a devnet — a summarizer, a linguist, a metered
 * sentiment scorer, an on-chain notary, and a reseller that buys from the summarizer and the sentiment
 * scorer and sells the combined "brief" — each registered as a provider with the facilitator (API key,
 * optional webhook) and as a seller with the market. Used by the demo, the examples and the tests.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address } from "viem";
import { z } from "zod";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type CallAllowance, withCallAllowance } from "../src/agent/callAllowance.ts";
import { createSpecialist, type Specialist, type SpecialistPlan } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import type { SpendEvent } from "../src/agent/spendReport.ts";
import { type Capability, pricingAmount } from "../src/agent/tools/capability.ts";
import { setChannelOperator } from "../src/chain/actions/channels/setChannelOperator.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { setOperator } from "../src/chain/actions/subscriptions/setOperator.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import type { Devnet, DevnetAccount } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { registerProvider } from "../src/client/registerProvider.ts";
import { createFacilitatorClient, type FetchFn } from "../src/http/facilitatorClient.ts";
import { parseUnitsExact } from "../src/protocol/amount.ts";
import { type Clock, systemClock } from "../src/protocol/clock.ts";
import {
  findLiveSubscription,
  holdRefOf,
} from "../src/schemes/subscription/agent/agentSubscriptionRecords.ts";
import type { Store } from "../src/store/store.ts";
import { BRIEF_PRICE, createBriefReseller } from "./createBriefReseller.ts";
import { createNotary } from "./createNotary.ts";
import { languageDetector } from "./languageDetector.ts";
import { sentimentScorer } from "./sentimentScorer.ts";
import { summarizer } from "./summarizer.ts";

const MONTH = 30 * 86_400;

/** Which dev account plays which part (account 0 deploys; the last one pays the facilitator's gas). */
export const demoAccounts = {
  researcher: 1,
  summarizer: 2,
  linguist: 3,
  sentiment: 4,
  notary: 5,
  reseller: 6,
} as const;

export type MarketplaceSeller = {
  name: string;
  account: DevnetAccount;
  specialist: Specialist;
  apiKey: string;
  plans: Record<string, SpecialistPlan>;
};

export type Marketplace = {
  sellers: MarketplaceSeller[];
  /** Spend events of the reseller's own purchases. */
  resellerSpend: SpendEvent[];
  stop(): Promise<void>;
};

export type StartMarketplaceOptions = {
  devnet: Devnet;
  facilitatorUrl: string;
  /** The facilitator's gas account: made operator of metered plans so it can deduct usage. */
  facilitatorSigner: Address;
  marketUrl: string;
  /** Store for the reseller's budget ledger. */
  store: Store;
  /** Where providers' webhook events are delivered, if anywhere. */
  webhookUrl?: string | undefined;
  fetch?: FetchFn | undefined;
  clock?: Clock | undefined;
  /** Told each webhook endpoint's signing secret (shown once, at registration). */
  onWebhookSecret?: ((secret: string) => void) | undefined;
  /** Called as each seller comes up. */
  onSeller?: ((seller: MarketplaceSeller) => void) | undefined;
};

/** Capabilities with the demo's prices: each seller offers what makes the policy's choice visible. */
function demoCapabilities(devnet: Devnet) {
  const summarize: Capability = {
    ...summarizer,
    pricing: [
      { type: "one-time", price: "0.02" },
      {
        type: "subscription",
        plan: { price: "0.05", interval: MONTH, includedUnits: 0, overageUnitPrice: "0" },
      },
    ],
  } as unknown as Capability;
  const detect: Capability = {
    ...languageDetector,
    pricing: [
      { type: "one-time", price: "0.005" },
      {
        type: "subscription",
        plan: { price: "0.1", interval: MONTH, includedUnits: 0, overageUnitPrice: "0" },
      },
      // A prepaid channel for bursts: a deposit once, then every call answered at once.
      { type: "channel", price: "0.004" },
    ],
  } as unknown as Capability;
  const sentiment: Capability = {
    ...sentimentScorer,
    pricing: [
      {
        type: "subscription",
        plan: { price: "0.05", interval: MONTH, includedUnits: 5, overageUnitPrice: "0.002" },
      },
    ],
  } as unknown as Capability;
  const notary = createNotary({
    walletClient: devnet.walletClient(devnet.accounts[demoAccounts.notary]!),
    publicClient: devnet.publicClient,
  }) as unknown as Capability;
  return { summarize, detect, sentiment, notary };
}

/** A capability's one-time price, smallest units. */
function oneTimePrice(capability: Capability): bigint {
  const entry = capability.pricing.find((p) => p.type === "one-time");
  if (entry === undefined || entry.type !== "one-time")
    throw new Error(`${capability.name} has no one-time price`);
  return pricingAmount(entry);
}

async function createPlans(
  devnet: Devnet,
  account: DevnetAccount,
  capabilities: readonly Capability[],
  facilitatorSigner: Address,
): Promise<Record<string, SpecialistPlan>> {
  const wallet = devnet.walletClient(account);
  const plans: Record<string, SpecialistPlan> = {};
  let metered = false;
  for (const capability of capabilities) {
    const entry = capability.pricing.find((p) => p.type === "subscription");
    if (entry === undefined || entry.type !== "subscription") continue;
    const terms = {
      amount: pricingAmount(entry.plan),
      interval: entry.plan.interval,
      includedUnits: entry.plan.includedUnits,
      overageUnitPrice: parseUnitsExact(entry.plan.overageUnitPrice),
    };
    const hash = await createPlan(wallet, {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: terms.amount,
      interval: BigInt(terms.interval),
      includedUnits: BigInt(terms.includedUnits),
      overageUnitPrice: terms.overageUnitPrice,
    });
    const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
    plans[capability.name] = {
      planId: getPlanIdFromReceipt(receipt).toString(),
      ...terms,
      manager: devnet.contracts.subscriptionManager,
    };
    if (terms.overageUnitPrice > 0n) metered = true;
  }
  if (metered) {
    // The facilitator deducts metered usage on the provider's behalf.
    const hash = await setOperator(wallet, {
      manager: devnet.contracts.subscriptionManager,
      operator: facilitatorSigner,
      allowed: true,
    });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
  }
  return plans;
}

export async function startMarketplace(options: StartMarketplaceOptions): Promise<Marketplace> {
  const { devnet } = options;
  const fetch = options.fetch ?? globalThis.fetch;
  const clock = options.clock ?? systemClock;
  const facilitator = createFacilitatorClient({ url: options.facilitatorUrl, fetch });
  const sellers: MarketplaceSeller[] = [];
  const resellerSpend: SpendEvent[] = [];
  const caps = demoCapabilities(devnet);
  /** The sellers' channel voucher journals (removed on stop). */
  const journals = mkdtempSync(join(tmpdir(), "tollgate-demo-channels-"));

  const startSeller = async (name: string, accountIndex: number, capabilities: readonly Capability[]) => {
    const account = devnet.accounts[accountIndex]!;
    // Webhooks first, so the provider hears of its own plans being created.
    const { apiKey } = await registerProvider(facilitator, account.account);
    if (options.webhookUrl !== undefined) {
      const endpoint = await facilitator.request("POST", "/webhooks", z.object({ secret: z.string() }), {
        body: { url: options.webhookUrl },
        headers: { authorization: `Bearer ${apiKey}` },
      });
      options.onWebhookSecret?.(endpoint.secret);
    }
    const plans = await createPlans(devnet, account, capabilities, options.facilitatorSigner);
    const byChannel = capabilities.some((c) => c.pricing.some((p) => p.type === "channel"));
    if (byChannel) {
      // The facilitator claims and closes this seller's channels on its behalf.
      const hash = await setChannelOperator(devnet.walletClient(account), {
        channels: devnet.contracts.channels,
        operator: options.facilitatorSigner,
        allowed: true,
      });
      await devnet.publicClient.waitForTransactionReceipt({ hash });
    }
    const specialist = createSpecialist({
      name,
      account: account.account,
      capabilities,
      facilitator: options.facilitatorUrl,
      network: devnet.network,
      token: devnet.contracts.usd,
      plans,
      providerApiKey: apiKey,
      ...(byChannel
        ? {
            channels: {
              contract: devnet.contracts.channels,
              journal: join(journals, `${name}.journal`),
              minDeposit: parseUnitsExact("0.04"),
            },
          }
        : {}),
      market: options.marketUrl,
      fetch,
      clock,
    });
    await specialist.start();
    const seller = { name, account, specialist, apiKey, plans };
    sellers.push(seller);
    options.onSeller?.(seller);
    return seller;
  };

  try {
    await startSeller("summarizer", demoAccounts.summarizer, [caps.summarize]);
    await startSeller("linguist", demoAccounts.linguist, [caps.detect]);
    const sentimentSeller = await startSeller("sentiment", demoAccounts.sentiment, [caps.sentiment]);
    await startSeller("notary", demoAccounts.notary, [caps.notary]);

    // The reseller is a buyer too: its own payer, budget and paid tools, discovered from its suppliers.
    const resellerAccount = devnet.accounts[demoAccounts.reseller]!;
    const resellerBudget = createBudgetLedger({ store: options.store, clock });
    await resellerBudget.setLimits("reseller", {
      total: parseUnitsExact("2"),
      perCall: parseUnitsExact("0.1"),
    });
    const supplierUrls = sellers
      .filter((s) => s.name === "summarizer" || s.name === sentimentSeller.name)
      .map((s) => s.specialist.url!);
    const supplies = await discoverTools({
      urls: supplierUrls,
      agent: "reseller",
      payer: createPayer({ account: resellerAccount.account, network: devnet.network, facilitator, clock }),
      budget: resellerBudget,
      calls: createCallCounter({ clock }),
      fetch,
      onSpend: (event) => resellerSpend.push(event),
    });
    const supplier = (name: string) => {
      const found = supplies.find((t) => t.capability.name === name);
      if (found === undefined) throw new Error(`the reseller found no ${name} supplier`);
      // Each purchase spends within the allowance of the sale it serves (what the buyer paid).
      return (input: Record<string, unknown>, allowance?: CallAllowance) =>
        found.tool.invoke(input, allowance === undefined ? undefined : withCallAllowance(allowance));
    };
    // Each sale is admitted only once its supplier spend is reserved in the reseller's budget, before
    // the buyer pays; 0.3 USDC stays free for the subscriptions it takes across its sales. Each
    // supplier's part is reserved under it (its per-provider and per-call limits met at admission):
    // the summary's price; for the sentiment plan, shared across sales, what a call may cost beyond its
    // period (overage, at most what the sale has left after the summary) — nothing while the
    // subscription's hold, reserved when the reseller subscribed, has room for it.
    const summarySeller = sellers.find((s) => s.name === "summarizer")!;
    const summaryPrice = oneTimePrice(caps.summarize);
    const sentimentPlan = sentimentSeller.plans.sentiment!;
    const brief = createBriefReseller(
      { summarize: supplier("summarize"), sentiment: supplier("sentiment") },
      {
        admission: {
          budget: resellerBudget,
          agent: "reseller",
          keepFree: parseUnitsExact("0.3"),
          purchases: [
            { provider: summarySeller.account.address, amount: summaryPrice },
            {
              provider: sentimentSeller.account.address,
              amount: parseUnitsExact(BRIEF_PRICE) - summaryPrice,
              heldBy: async () => {
                const held = await findLiveSubscription(options.store, {
                  subscriber: resellerAccount.address,
                  manager: sentimentPlan.manager,
                  planId: sentimentPlan.planId,
                });
                return held?.status === "active" && held.agent === "reseller"
                  ? holdRefOf(held.id)
                  : undefined;
              },
            },
          ],
        },
      },
    );
    await startSeller("reseller", demoAccounts.reseller, [brief as unknown as Capability]);
  } catch (error) {
    for (const s of sellers) await s.specialist.stop();
    rmSync(journals, { recursive: true, force: true });
    throw error;
  }

  return {
    sellers,
    resellerSpend,
    async stop() {
      for (const s of sellers.reverse()) await s.specialist.stop();
      rmSync(journals, { recursive: true, force: true });
    },
  };
}
