/** What the channel wallet's parts share: its options with defaults applied, the store and the book. */
import type { Clock } from "../../../protocol/clock.ts";
import type { ChannelBook } from "./channelBook.ts";
import type { ChannelTokenDomainOf } from "./channelTokenDomain.ts";
import type { ChannelWalletStore } from "./channelWalletStore.ts";
import type { ChannelWalletOptions } from "./channelWalletTypes.ts";
import type { WalletRoutes } from "./walletRoutes.ts";

export type ChannelWalletContext = {
  options: ChannelWalletOptions;
  store: ChannelWalletStore;
  clock: Clock;
  random: (bytes: number) => Uint8Array;
  chainId: number;
  book: ChannelBook;
  routes: WalletRoutes;
  tokenDomainOf: ChannelTokenDomainOf;
};
