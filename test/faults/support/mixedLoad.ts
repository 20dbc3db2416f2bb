/**
 * The rest of the fault suite's and the soak's load, beside one-time purchases (workload.ts): metered
 * calls on a subscription with an overage cap, calls paid by channel vouchers, and agents buying a paid
 * tool through their budget ledger. Each loop records what it was told, for the reconciliation.
 */
import type { ToolMessage } from "@langchain/core/messages";
import { createBudgetLedger } from "../../../src/agent/budget/createBudgetLedger.ts";
import { resolvePendingPayments } from "../../../src/agent/budget/pendingPayments.ts";
import { type PaidToolReceipt, paidTool } from "../../../src/agent/paidTool.ts";
import type { DevnetAccount } from "../../../src/chain/startDevnet.ts";
import { createPayer } from "../../../src/client/createPayer.ts";
import type { FetchFn } from "../../../src/http/facilitatorClient.ts";
import { systemClock } from "../../../src/protocol/clock.ts";
import { createChannelFetch } from "../../../src/schemes/channel/client/channelFetch.ts";
import {
  type ChannelWallet,
  createChannelWallet,
} from "../../../src/schemes/channel/client/channelWallet.ts";
import { createStore } from "../../../src/store/createStore.ts";
import type { Store } from "../../../src/store/store.ts";
import { CHANNEL_PRICE, type FaultStack, PRICE, PUBLIC_ORIGIN } from "./faultStack.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A call of the mixed load: when it started, how long it took, how it ended. */
export type Call = {
  startedAt: number;
  latencyMs: number;
  /** `served` (200), `refused` (a 402 the load expects: cap or budget reached), or what went wrong. */
  outcome: "served" | "refused" | string;
};

export type MeteredSubscriber = {
  account: DevnetAccount;
  subscriptionId: bigint;
  maxOverage: bigint;
  calls: Call[];
};

export type ChannelPayer = { account: DevnetAccount; wallet: ChannelWallet; calls: Call[] };

export type AgentRun = { name: string; account: DevnetAccount; receipts: PaidToolReceipt[]; calls: Call[] };

export type MixedLoad = {
  metered: MeteredSubscriber[];
  channels: ChannelPayer[];
  agents: AgentRun[];
  /** The agents' budget ledger's store (in this process). */
  agentStore: Store;
  budgetReport(agent: string): Promise<{ spent: bigint; reserved: bigint }>;
  calls(): Call[];
  stop(): Promise<void>;
};

const timed =
  (fetchImpl: FetchFn): FetchFn =>
  (input, init) =>
    fetchImpl(input, { ...init, signal: AbortSignal.timeout(15_000) });

/**
 * Subscribes the metered accounts (caps `caps[i]`, cycling) before it starts; then every loop calls
 * until `stop()`, `pauseMs` apart.
 */
export async function startMixedLoad(
  stack: FaultStack,
  options: { meteredCaps: readonly bigint[]; pauseMs: number },
): Promise<MixedLoad> {
  let stopping = false;
  const gate = (n: number) => stack.gateUrls[n % stack.gateUrls.length]!;
  const record = (calls: Call[], startedAt: number, outcome: string) =>
    calls.push({ startedAt, latencyMs: Date.now() - startedAt, outcome });

  // Metered: one subscription each on the metered plan, capped.
  const metered: MeteredSubscriber[] = [];
  for (const [i, account] of stack.meteredSubscribers.entries()) {
    const payer = createPayer({
      account: account.account,
      network: stack.devnet.network,
      facilitator: stack.client(),
    });
    const maxOverage = options.meteredCaps[i % options.meteredCaps.length]!;
    const subscriptionId = await payer.subscribe({ planId: stack.meteredPlanId, maxOverage });
    metered.push({ account, subscriptionId, maxOverage, calls: [] });
  }
  const meteredLoops = metered.map(async (m, index) => {
    const payer = createPayer({
      account: m.account.account,
      network: stack.devnet.network,
      facilitator: stack.client(),
    });
    for (let n = 0; !stopping; n++) {
      const startedAt = Date.now();
      try {
        const headers = await payer.subscriptionHeaders(m.subscriptionId, PUBLIC_ORIGIN);
        const response = await timed(fetch)(`${gate(index + n)}/api/metered`, { headers });
        const text = await response.text();
        if (response.status === 200) record(m.calls, startedAt, "served");
        else if (response.status === 402 && text.includes("AllowanceExhausted"))
          record(m.calls, startedAt, "refused");
        else record(m.calls, startedAt, `${response.status} ${text.slice(0, 120)}`);
      } catch (error) {
        record(m.calls, startedAt, String(error).slice(0, 120));
      }
      await sleep(options.pauseMs);
    }
  });

  // Channels: a wallet each, vouchers to both gates (their tallies are shared in Redis).
  const channels: ChannelPayer[] = stack.channelPayers.map((account) => ({
    account,
    wallet: createChannelWallet({
      account: account.account,
      network: stack.devnet.network,
      facilitator: stack.client(),
      calls: 400,
    }),
    calls: [],
  }));
  const channelLoops = channels.map(async (c, index) => {
    const paidFetch = createChannelFetch(timed(fetch), { wallet: c.wallet, maxPrice: CHANNEL_PRICE });
    for (let n = 0; !stopping; n++) {
      const startedAt = Date.now();
      try {
        const response = await paidFetch(`${gate(index + n)}/api/channel`);
        const text = await response.text();
        record(
          c.calls,
          startedAt,
          response.status === 200 ? "served" : `${response.status} ${text.slice(0, 120)}`,
        );
      } catch (error) {
        record(c.calls, startedAt, String(error).slice(0, 120));
      }
      await sleep(options.pauseMs);
    }
  });

  // Agents: a budget ledger (its own store), a paid tool per gate, calls back to back.
  const agentStore = await createStore({ dataDir: "memory://" });
  const budget = createBudgetLedger({ store: agentStore, clock: systemClock });
  const agents: AgentRun[] = [];
  for (const [i, account] of stack.agents.entries()) {
    const name = `fault-agent-${i}`;
    await budget.setLimits(name, { total: 50_000_000n });
    agents.push({ name, account, receipts: [], calls: [] });
  }
  const agentPayers = new Map<string, ReturnType<typeof createPayer>>();
  const agentLoops = agents.map(async (a) => {
    const payer = createPayer({
      account: a.account.account,
      network: stack.devnet.network,
      facilitator: stack.client(),
    });
    agentPayers.set(a.name, payer);
    const tools = stack.gateUrls.map((url, g) =>
      paidTool(
        {
          name: `item-${g}`,
          description: "An item, paid once per call",
          method: "GET",
          url: `${url}/api/item`,
          input: { type: "object", properties: {} },
        },
        { agent: a.name, payer, budget, maxPrice: PRICE, fetch: timed(fetch) },
      ),
    );
    for (let n = 0; !stopping; n++) {
      const startedAt = Date.now();
      try {
        const message = (await tools[n % tools.length]!.invoke({
          type: "tool_call",
          id: `${a.name}-${n}`,
          name: `item-${n % tools.length}`,
          args: {},
        })) as ToolMessage;
        const receipt = message.artifact as PaidToolReceipt;
        a.receipts.push(receipt);
        record(a.calls, startedAt, receipt.error === undefined ? "served" : `${receipt.error.code}`);
      } catch (error) {
        record(a.calls, startedAt, String(error).slice(0, 120));
      }
      await sleep(options.pauseMs);
    }
  });

  return {
    metered,
    channels,
    agents,
    agentStore,
    async budgetReport(agent) {
      const report = await budget.report(agent);
      return { spent: report.spent.total, reserved: report.reserved.total };
    },
    calls: () => [
      ...metered.flatMap((m) => m.calls),
      ...channels.flatMap((c) => c.calls),
      ...agents.flatMap((a) => a.calls),
    ],
    async stop() {
      stopping = true;
      await Promise.all([...meteredLoops, ...channelLoops, ...agentLoops]);
      // Payments whose /authorize answer was lost stay held until read back: as a run's end does,
      // resolve them (settled: spent; never settled: released once their authorization expired).
      for (const a of agents) {
        const payer = agentPayers.get(a.name);
        if (payer === undefined) continue;
        for (let i = 0; i < 400 && (await budget.pendingPayments(a.name)).length > 0; i++) {
          await resolvePendingPayments({ agent: a.name, budget, payer, clock: systemClock });
          if ((await budget.pendingPayments(a.name)).length > 0) await sleep(2_000);
        }
      }
    },
  };
}
