/** `tollgate/market`: the marketplace registry service and its client (DESIGN.md §7). */
export { type CreateMarketOptions, createMarket, serveMarket } from "./createMarket.ts";
export { createMarketClient, type MarketClient, type MarketSearch } from "./marketClient.ts";
