/**
 * The agent suites' shared world: one devnet, a facilitator over it, the market registry on the
 * facilitator's store, and the marketplace specialists of agents/ registered with it.
 */
import pino from "pino";
import type { Address } from "viem";
import { type Marketplace, type MarketplaceSeller, startMarketplace } from "../../agents/marketplace.ts";
import { getTokenAllowance } from "../../src/chain/actions/usd/getTokenAllowance.ts";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../../src/chain/startDevnet.ts";
import type { RunningServer } from "../../src/facilitator/createFacilitator.ts";
import { serveMarket } from "../../src/market/createMarket.ts";
import { systemClock } from "../../src/protocol/clock.ts";
import { startTestFacilitator, type TestFacilitator } from "./facilitatorHarness.ts";

export type AgentStack = {
  devnet: Devnet;
  tf: TestFacilitator;
  market: RunningServer;
  marketplace: Marketplace;
  /** Stops everything, last started first. */
  stop(): Promise<void>;
};

/** Starts the stack; if a part fails to start, what already started is stopped before rethrowing. */
export async function startAgentStack(
  options: { facilitator?: Parameters<typeof startTestFacilitator>[1] } = {},
): Promise<AgentStack> {
  const stops: (() => Promise<void>)[] = [];
  const stop = async () => {
    for (const s of stops.reverse()) await s();
    stops.length = 0;
  };
  try {
    const devnet = await startDevnet({ accounts: 10 });
    stops.push(() => devnet.stop());
    const tf = await startTestFacilitator(devnet, options.facilitator);
    stops.push(() => tf.stop());
    const market = await serveMarket({
      store: tf.store,
      clock: systemClock,
      logger: pino({ level: "silent" }),
    });
    stops.push(() => market.close());
    const marketplace = await startMarketplace({
      devnet,
      facilitatorUrl: tf.url,
      facilitatorSigner: devnet.accounts[devnet.accounts.length - 1]!.address,
      marketUrl: market.url,
      store: tf.store,
    });
    stops.push(() => marketplace.stop());
    return { devnet, tf, market, marketplace, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The marketplace seller named `name`; throws when the stack has none. */
export function sellerNamed(stack: AgentStack, name: string): MarketplaceSeller {
  const found = stack.marketplace.sellers.find((s) => s.name === name);
  if (found === undefined) throw new Error(`no ${name} seller`);
  return found;
}

/** An address's devnet USD balance. */
export function usdBalanceOf(stack: AgentStack, owner: Address): Promise<bigint> {
  return getTokenBalance(stack.devnet.publicClient, { token: stack.devnet.contracts.usd, owner });
}

/** What `owner` lets the SubscriptionManager pull in devnet USD. */
export function managerAllowanceOf(stack: AgentStack, owner: Address): Promise<bigint> {
  return getTokenAllowance(stack.devnet.publicClient, {
    token: stack.devnet.contracts.usd,
    owner,
    spender: stack.devnet.contracts.subscriptionManager,
  });
}
