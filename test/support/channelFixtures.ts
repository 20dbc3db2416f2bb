/**
 * Channel helpers for facilitator suites: a payer's signed open as the `POST /channels` body, vouchers
 * in the wire form a gate hands over, and provider registration.
 */
import { randomBytes } from "node:crypto";
import { type Address, type Hex, toHex } from "viem";
import { setChannelOperator } from "../../src/chain/actions/channels/setChannelOperator.ts";
import { signChannelOpen } from "../../src/chain/actions/channels/signChannelOpen.ts";
import type { Devnet, DevnetAccount } from "../../src/chain/startDevnet.ts";
import {
  type CreateFacilitatorOptions,
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { providersModule } from "../../src/facilitator/providers/providersModule.ts";
import { base64UrlEncode } from "../../src/protocol/base64.ts";
import type { ChannelOpenRequest } from "../../src/protocol/channels.ts";
import type { ChannelVoucher } from "../../src/protocol/channelVoucher.ts";
import {
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
} from "../../src/protocol/subscriptions.ts";
import {
  type ChannelsModuleOptions,
  createChannelsModule,
} from "../../src/schemes/channel/facilitator/channelsModule.ts";
import type { Store } from "../../src/store/store.ts";
import { createTestSessionKey, signTestVoucher, type TestSessionKey } from "./channelSessionKey.ts";

export type SignedTestOpen = { body: ChannelOpenRequest; key: TestSessionKey; channelId: Hex };

/** A payer's signed open of a channel to `payee`, as the wire body of `POST /channels`. */
export async function signTestOpen(
  devnet: Devnet,
  payer: DevnetAccount,
  payee: Address,
  overrides: { amount?: bigint; closeDelay?: number; validBefore?: bigint } = {},
): Promise<SignedTestOpen> {
  const key = createTestSessionKey();
  const salt = toHex(randomBytes(32));
  const amount = overrides.amount ?? 2_000_000n;
  const closeDelay = overrides.closeDelay ?? 3_600;
  const now = (await devnet.publicClient.getBlock()).timestamp;
  const validBefore = overrides.validBefore ?? now + 600n;
  const signed = await signChannelOpen(payer.account, {
    chainId: devnet.chain.id,
    channels: devnet.contracts.channels,
    tokenDomain: {
      name: devnet.token.name,
      version: devnet.token.version,
      chainId: devnet.chain.id,
      verifyingContract: devnet.contracts.usd,
    },
    payee,
    amount,
    sessionKeyX: key.x,
    sessionKeyY: key.y,
    closeDelay: BigInt(closeDelay),
    salt,
    validAfter: 0n,
    validBefore,
  });
  const body: ChannelOpenRequest = {
    network: devnet.network,
    contract: devnet.contracts.channels,
    token: devnet.contracts.usd,
    payer: payer.address,
    payee,
    amount: amount.toString(),
    sessionKeyX: key.x,
    sessionKeyY: key.y,
    closeDelay,
    salt,
    validAfter: "0",
    validBefore: validBefore.toString(),
    signature: signed.signature,
  };
  return { body, key, channelId: signed.channelId };
}

/** A voucher in the wire form of `POST /channels/vouchers`. */
export function wireVoucher(
  devnet: Devnet,
  key: TestSessionKey,
  channelId: Hex,
  cumulativeAmount: bigint,
): ChannelVoucher {
  const signature = signTestVoucher(key, {
    chainId: devnet.chain.id,
    channels: devnet.contracts.channels,
    channelId,
    cumulativeAmount,
  });
  return {
    channelId,
    cumulativeAmount: cumulativeAmount.toString(),
    signature: base64UrlEncode(Buffer.from(signature.slice(2), "hex")),
  };
}

/**
 * The channel suites' facilitator: providers and channels only, the devnet's contracts and token, a
 * fresh proof key, started and listening. `publicClient` replaces the devnet's (a client without a
 * chain watch, say).
 */
export async function startChannelFacilitator(
  devnet: Devnet,
  options: {
    store: Store;
    gas: DevnetAccount;
    channels: ChannelsModuleOptions;
    publicClient?: CreateFacilitatorOptions["publicClient"];
    outbox?: CreateFacilitatorOptions["outbox"];
    rateLimits?: CreateFacilitatorOptions["rateLimits"];
  },
): Promise<{ facilitator: Facilitator; server: RunningServer }> {
  const facilitator = createFacilitator({
    store: options.store,
    publicClient: options.publicClient ?? devnet.publicClient,
    network: devnet.network,
    gasAccount: options.gas.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    channels: devnet.contracts.channels,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    builtinModules: false,
    modules: [providersModule, createChannelsModule(options.channels)],
    outbox: options.outbox,
    rateLimits: options.rateLimits,
  });
  await facilitator.start();
  return { facilitator, server: await serveApp(facilitator.app) };
}

/** `payee` names `operator` (the facilitator's gas account) the operator of its channels; mined. */
export async function nameChannelOperator(devnet: Devnet, payee: DevnetAccount, operator: Address) {
  const hash = await setChannelOperator(devnet.walletClient(payee), {
    channels: devnet.contracts.channels,
    operator,
    allowed: true,
  });
  await devnet.publicClient.waitForTransactionReceipt({ hash });
}

/** Registers `account` as a provider at a facilitator and returns its API key. */
export async function registerTestProvider(url: string, account: DevnetAccount): Promise<string> {
  const post = (path: string, body: unknown) =>
    fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const challenge = ProviderChallengeResponseSchema.parse(
    await (await post("/providers/challenge", { address: account.address })).json(),
  );
  const signature = await account.account.signMessage({ message: challenge.challenge });
  const response = await post("/providers", {
    address: account.address,
    challenge: challenge.challenge,
    signature,
  });
  if (response.status !== 201) throw new Error(`provider registration failed: ${response.status}`);
  return ProviderRegisterResponseSchema.parse(await response.json()).apiKey;
}
