/**
 * The agent suites' shared world: one devnet, a facilitator over it, the market registry on the
 * facilitator's store, and the marketplace specialists of agents/ registered with it.
 */
import pino from "pino";
import { type Marketplace, startMarketplace } from "../../agents/marketplace.ts";
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
export async function startAgentStack(): Promise<AgentStack> {
  const stops: (() => Promise<void>)[] = [];
  const stop = async () => {
    for (const s of stops.reverse()) await s();
    stops.length = 0;
  };
  try {
    const devnet = await startDevnet({ accounts: 10 });
    stops.push(() => devnet.stop());
    const tf = await startTestFacilitator(devnet);
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
