/** The channel wallet's options and the values it hands out, apart from the wallet so its parts share them. */
import type { Address, Hex } from "viem";
import type { TypedDataSigner } from "../../../chain/signers/typedDataSigner.ts";
import type { FacilitatorClient, FetchFn } from "../../../http/facilitatorClient.ts";
import type { ChannelCloseRequestResponse, ChannelCloseResponse } from "../../../protocol/channels.ts";
import type { Clock } from "../../../protocol/clock.ts";
import type { Network } from "../../../protocol/network.ts";
import type { ChannelWalletStore } from "./channelWalletStore.ts";

/** What a payer needs of a gate's `channel` offer. */
export type ChannelTermsInput = {
  network: Network;
  contract: Address;
  facilitator: string;
  payee: Address;
  token: Address;
  /** Price of one request. */
  price: bigint;
  minDeposit: bigint;
  minCloseDelay: number;
  /** The tag of the gate's voucher store: the channel's salt starts with it (absent from older gates). */
  tag?: Hex | undefined;
};

export type ChannelWalletOptions = {
  account: TypedDataSigner;
  network: Network;
  facilitator: FacilitatorClient;
  store?: ChannelWalletStore | undefined;
  clock?: Clock | undefined;
  random?: ((bytes: number) => Uint8Array) | undefined;
  /**
   * Requests a channel's deposit is sized for when the caller names none (default 1 000); a function
   * is asked per open (a policy sizing deposits from its forecast and budget).
   */
  calls?: number | ((terms: ChannelTermsInput) => number | undefined) | undefined;
  /** The largest deposit one channel may take (default: no cap beyond `approveDeposit`). */
  maxDeposit?: bigint | undefined;
  /** Close delay asked for, seconds (default 3 600, raised to the gate's minimum). */
  closeDelay?: number | undefined;
  /**
   * The longest close delay the payer accepts, seconds (default one day): a gate whose minimum is above
   * it is refused (`OfferMismatch`, `details.field` "closeDelay") before anything is signed.
   */
  maxCloseDelay?: number | undefined;
  /** Open the next channel when less than this share of the deposit is left (default 0.25). */
  renewBelow?: number | undefined;
  /**
   * Asked before a deposit leaves the wallet (a budget holds it here, under the channel's id); throw to
   * refuse. Called after the open is signed locally and before anything is stored or sent.
   */
  approveDeposit?: ((amount: bigint, terms: ChannelTermsInput, channelId: Hex) => Promise<void>) | undefined;
  /**
   * Asked before a top-up leaves the wallet (a budget grows the channel's hold); throw to refuse (the
   * wallet then opens the next channel instead, through `approveDeposit`).
   */
  approveTopUp?: ((amount: bigint, terms: ChannelTermsInput, channelId: Hex) => Promise<void>) | undefined;
  /**
   * Top a channel running low up through the facilitator (default true); `false` opens the next channel
   * instead, as does a facilitator without the top-up route.
   */
  topUp?: boolean | undefined;
  /** The token's EIP-712 domain name and version (default: the facilitator's `GET /supported`). */
  tokenDomain?: ((token: Address) => Promise<{ name: string; version: string }>) | undefined;
  /**
   * Reaches sellers' gates for cooperative closes (`requestClose`). Without it a close waits for the
   * close delay unless the seller closes on its own.
   */
  fetch?: FetchFn | undefined;
};

/** A close request's answer, with the seller's cooperative close when its gate took part. */
export type ChannelCloseOutcome = ChannelCloseRequestResponse & {
  /** The seller's gate closed cooperatively (`closed`: the rest is back in the wallet) or is closing. */
  cooperative?: ChannelCloseResponse | undefined;
  /** Why the seller's gate did not close it cooperatively (the rest then comes back after the delay). */
  cooperativeError?: string | undefined;
};

/** A payment on a channel: the header to send and what to book once the answer is in. */
export type ChannelVoucherPayment = {
  channelId: Hex;
  header: string;
  cumulativeAmount: bigint;
  price: bigint;
};
