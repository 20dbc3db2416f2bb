/** `tollgate/market`: the marketplace registry service and its client (docs/market.md). */
export {
  type CreateMarketOptions,
  createMarket,
  createMarketService,
  type MarketService,
  serveMarket,
} from "./createMarket.ts";
export { pinnedSellerFetch, type SellerTargetOptions } from "./fetchSellerDocument.ts";
export { createMarketClient, type MarketClient, type MarketSearch } from "./marketClient.ts";
export type { SellerLivenessOptions } from "./sellerLiveness.ts";
