/**
 * The port each server the CLI starts listens on when not told otherwise. They are all different so
 * that a devnet, a facilitator, a market and the agent dashboard run side by side on one machine with
 * their defaults; a test checks it. The facilitator's and the market's are defined by their own
 * modules (the facilitator's environment schema, the market's API) and only read here.
 */
import { FacilitatorEnvSchema } from "../facilitator/facilitatorConfig.ts";
import { DEFAULT_MARKET_PORT } from "../market/marketApi.ts";

/** Default listening ports by server: `tollgate devnet up`, `facilitator`, `market`, `dashboard`. */
export const DEFAULT_PORTS = {
  devnet: 8545,
  facilitator: FacilitatorEnvSchema.shape.TOLLGATE_PORT.parse(undefined),
  market: DEFAULT_MARKET_PORT,
  dashboard: 4040,
} as const;
