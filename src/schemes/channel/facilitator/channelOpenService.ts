/**
 * `POST /channels`: relays a payer's gasless channel open (docs/channels.md). Checks in the order of
 * `/authorize`, cheapest first: schema (route), network, contract, served token, minimum deposit, close
 * delay, validity window, session key on the curve, the payer's signature (recovered, or an ERC-1271
 * wallet left to the simulation), the payer's rate limit, nonce unused, balance, simulation. Then one
 * relayed transaction through the outbox.
 *
 * Idempotent on the EIP-3009 nonce: the same body returns the same channel and transaction, whether
 * it is resent after success, sent twice at once (one flight per nonce in a process; across instances
 * the loser's simulation finds the channel open and answers from the chain), or resent after a crash
 * between the transaction and its record (the chain says the channel is open).
 */

import type { Logger } from "pino";
import { type Address, getAddress, type Hash, type Hex, type PublicClient } from "viem";
import { channelCallForRelay } from "../../../chain/actions/channels/channelCallForRelay.ts";
import { computeChannelId, computeChannelOpenNonce } from "../../../chain/actions/channels/channelHashes.ts";
import { openChannelWithAuthorizationArgs } from "../../../chain/actions/channels/openChannelWithAuthorization.ts";
import { pageLogRanges } from "../../../chain/actions/getLogsPaged.ts";
import { getAuthorizationState } from "../../../chain/actions/usd/getAuthorizationState.ts";
import { getIsBlacklisted } from "../../../chain/actions/usdc/getIsBlacklisted.ts";
import { tollgateChannelsAbi } from "../../../chain/contracts/artifacts/TollgateChannels.ts";
import { nameBlacklistedAccount } from "../../../facilitator/blacklistRefusal.ts";
import type { FacilitatorToken } from "../../../facilitator/facilitatorToken.ts";
import type { GasAccount } from "../../../facilitator/gasAccount.ts";
import type { ChannelOpenRequest, ChannelOpenResponse } from "../../../protocol/channels.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { Queryable, Store } from "../../../store/store.ts";
import { channelToWire, readChainChannel } from "./channelChain.ts";
import { recordOpened } from "./channelClaimEvents.ts";
import { toChannelError } from "./channelErrors.ts";
import { findChannelByOpenNonce } from "./channelRecords.ts";
import {
  checkAuthorizationWindow,
  checkPayerBalance,
  checkReceiveAuthorization,
} from "./checkReceiveAuthorization.ts";

export type ChannelOpenContext = {
  store: Store;
  publicClient: Pick<
    PublicClient,
    "readContract" | "simulateContract" | "getCode" | "getContractEvents" | "getBlockNumber"
  >;
  gas: Pick<GasAccount, "address" | "sendAndWait">;
  network: `eip155:${number}`;
  chainId: number;
  contract: Address;
  tokens: readonly FacilitatorToken[];
  /** Most blocks one `eth_getLogs` call spans (default 2 000). */
  logsRange?: number | undefined;
  clock: Clock;
  logger: Logger;
  recordEvent(db: Queryable, type: string, data: Record<string, unknown>): Promise<void>;
};

export type ChannelOpenPolicy = {
  /** The smallest deposit relayed, per token (smallest unit). */
  minDeposit(token: FacilitatorToken): bigint;
  /** The shortest close delay relayed (seconds). */
  minCloseDelay: number;
  /** Seconds an authorization must still be valid for when it arrives. */
  minRemainingSeconds: number;
  /** Takes the payer's rate-limit bucket (throws `RateLimited`). */
  takePayer(payer: Address): void;
  /** Whether a session key point is on P-256. */
  isSessionKey(x: Hex, y: Hex): boolean;
};

export type ChannelOpenResult = { status: 200 | 201; body: ChannelOpenResponse };

function check(
  ctx: ChannelOpenContext,
  policy: ChannelOpenPolicy,
  req: ChannelOpenRequest,
): FacilitatorToken {
  if (req.network !== ctx.network) {
    throw new TollgateError("UnsupportedNetwork", `this facilitator relays channels on ${ctx.network}`, {
      details: { network: req.network },
    });
  }
  if (req.contract.toLowerCase() !== ctx.contract.toLowerCase()) {
    throw new TollgateError(
      "InvalidRequest",
      "channels are opened on this facilitator's TollgateChannels only",
      {
        details: { contract: getAddress(ctx.contract) },
      },
    );
  }
  const token = ctx.tokens.find((t) => t.address.toLowerCase() === req.token.toLowerCase());
  if (token === undefined) {
    throw new TollgateError("UnsupportedToken", "this facilitator does not relay channels in that token");
  }
  const minimum = policy.minDeposit(token);
  if (BigInt(req.amount) < minimum) {
    throw new TollgateError("AmountMismatch", `a channel deposit must be at least ${minimum}`, {
      details: { reason: "deposit_below_minimum", amount: req.amount, minimum: minimum.toString() },
    });
  }
  if (req.closeDelay < policy.minCloseDelay) {
    throw new TollgateError("InvalidRequest", `close delay must be at least ${policy.minCloseDelay} s`, {
      details: { closeDelay: req.closeDelay, minimum: policy.minCloseDelay },
    });
  }
  checkAuthorizationWindow(ctx.clock, policy.minRemainingSeconds, req);
  if (!policy.isSessionKey(req.sessionKeyX, req.sessionKeyY)) {
    throw new TollgateError("InvalidRequest", "the session key is not a P-256 point");
  }
  return token;
}
function nonceOf(ctx: ChannelOpenContext, req: ChannelOpenRequest): Hex {
  return computeChannelOpenNonce({
    chainId: ctx.chainId,
    channels: ctx.contract,
    payee: req.payee,
    token: req.token,
    sessionKeyX: req.sessionKeyX,
    sessionKeyY: req.sessionKeyY,
    closeDelay: BigInt(req.closeDelay),
    salt: req.salt,
  });
}
function checkSignature(
  ctx: ChannelOpenContext,
  req: ChannelOpenRequest,
  token: FacilitatorToken,
  nonce: Hex,
): Promise<void> {
  return checkReceiveAuthorization(ctx.publicClient, {
    chainId: ctx.chainId,
    token,
    payer: req.payer,
    to: ctx.contract,
    nonce,
    auth: req,
    refusal: "signature was not made by the payer for these channel terms",
  });
}
/** The channel as now on chain, recorded, with the transaction that opened it. */
async function answer(
  ctx: ChannelOpenContext,

  channelId: Hex,
  nonce: Hex,
  tx: Hash | null,
  status: 200 | 201,
): Promise<ChannelOpenResult> {
  const chain = await readChainChannel(
    ctx.publicClient,
    { chainId: ctx.chainId, contract: ctx.contract },
    channelId,
  ).catch((e: unknown) => {
    throw toChannelError(e);
  });
  if (chain === undefined) {
    throw new TollgateError("ChainUnavailable", "the channel is not visible on chain yet; try again", {
      retryAfter: 1,
    });
  }
  const transaction = tx ?? (await findOpenTransaction(ctx, channelId));
  await ctx.store.transaction((db) => recordOpened(ctx, db, chain, nonce, transaction));
  return { status, body: { channelId, transaction, channel: channelToWire(chain, ctx.network) } };
}
async function findOpenTransaction(ctx: ChannelOpenContext, channelId: Hex): Promise<Hash> {
  // The channel is open, so its log exists: read history newest page first, in pages a provider accepts.
  const logs = await pageLogRanges(
    ctx.publicClient,
    { fromBlock: 0n, maxRange: ctx.logsRange, order: "newest-first" },
    (fromBlock, toBlock) =>
      ctx.publicClient.getContractEvents({
        address: ctx.contract,
        abi: tollgateChannelsAbi,
        eventName: "ChannelOpened",
        args: { channelId },
        fromBlock,
        toBlock,
      }),
  ).catch((e: unknown) => {
    throw toChannelError(e);
  });
  const hash = logs[0]?.transactionHash;
  if (hash == null)
    throw new TollgateError("ChainUnavailable", "cannot find the open transaction yet", { retryAfter: 1 });
  return hash;
}
/** Whether `req`'s authorization already opened its channel (then the answer is the channel). */
async function alreadyOpened(ctx: ChannelOpenContext, req: ChannelOpenRequest, nonce: Hex): Promise<boolean> {
  const used = await getAuthorizationState(ctx.publicClient, {
    token: req.token,
    authorizer: req.payer,
    nonce,
  });
  return used;
}
async function refuseBlacklistedPayee(ctx: ChannelOpenContext, req: ChannelOpenRequest): Promise<void> {
  const listed = await getIsBlacklisted(ctx.publicClient, { token: req.token, account: req.payee }).catch(
    () => false,
  );
  if (!listed) return;
  const payee = getAddress(req.payee);
  throw new TollgateError(
    "AccountBlacklisted",
    `the token's issuer has blacklisted the payee ${payee}; a channel to it could never be claimed`,
    { details: { account: payee, role: "payee", token: getAddress(req.token) } },
  );
}
/**
 * The chain's word before relaying: the answer when this authorization already opened the channel,
 * else a refusal when the payer's balance does not cover the deposit or the payee is blacklisted.
 */
async function checkBeforeRelay(
  ctx: ChannelOpenContext,
  req: ChannelOpenRequest,
  channelId: Hex,
  nonce: Hex,
): Promise<ChannelOpenResult | undefined> {
  try {
    // Returned unawaited, as a refusal of `answer` is its own (not wrapped by the catch below).
    if (await alreadyOpened(ctx, req, nonce)) return answer(ctx, channelId, nonce, null, 200);
    // Read together: a payee the token's issuer blacklisted (USDC) could never be paid by a claim, so
    // its channel is refused now rather than lock the payer's deposit up to the close delay.
    await Promise.all([
      checkPayerBalance(ctx.publicClient, {
        token: req.token,
        payer: req.payer,
        amount: req.amount,
        refusal: "the payer's balance does not cover the deposit",
      }),
      refuseBlacklistedPayee(ctx, req),
    ]);
  } catch (error) {
    throw toChannelError(error);
  }
  return undefined;
}

/** Simulates the open, sends it through the gas account and answers the channel it opened. */
async function sendOpen(
  ctx: ChannelOpenContext,
  req: ChannelOpenRequest,
  channelId: Hex,
  nonce: Hex,
): Promise<ChannelOpenResult> {
  const args = openChannelWithAuthorizationArgs({
    payer: req.payer,
    payee: req.payee,
    token: req.token,
    amount: BigInt(req.amount),
    sessionKeyX: req.sessionKeyX,
    sessionKeyY: req.sessionKeyY,
    closeDelay: BigInt(req.closeDelay),
    salt: req.salt,
    validAfter: BigInt(req.validAfter),
    validBefore: BigInt(req.validBefore),
    signature: req.signature,
  });
  const call = channelCallForRelay({ channels: ctx.contract, functionName: "openWithAuthorization", args });
  try {
    await ctx.publicClient.simulateContract({ ...call.simulation, account: ctx.gas.address } as never);
  } catch (error) {
    // A blacklisted payer: the token refuses its deposit, named here (blacklistRefusal.ts).
    const refused = await nameBlacklistedAccount(ctx.publicClient, toChannelError(error), {
      token: req.token,
      parties: { payer: req.payer },
    });
    // Another instance (or a crashed attempt) opened it with this very authorization.
    if (refused.code === "NonceAlreadyUsed" && (await alreadyOpened(ctx, req, nonce).catch(() => false))) {
      return answer(ctx, channelId, nonce, null, 200);
    }
    throw refused;
  }
  let sent: { hash: Hash };
  try {
    sent = await ctx.gas.sendAndWait({ to: call.to, data: call.data });
  } catch (error) {
    if (await alreadyOpened(ctx, req, nonce).catch(() => false))
      return answer(ctx, channelId, nonce, null, 200);
    throw toChannelError(error);
  }
  ctx.logger.info({ channelId, payer: req.payer, payee: req.payee, tx: sent.hash }, "channel opened");
  return answer(ctx, channelId, nonce, sent.hash, 201);
}

async function relay(
  ctx: ChannelOpenContext,
  policy: ChannelOpenPolicy,
  req: ChannelOpenRequest,
  token: FacilitatorToken,
  nonce: Hex,
): Promise<ChannelOpenResult> {
  const channelId = computeChannelId({
    chainId: ctx.chainId,
    channels: ctx.contract,
    payer: req.payer,
    payee: req.payee,
    token: req.token,
    salt: req.salt,
  });
  const known = await findChannelByOpenNonce(ctx.store, nonce);
  if (known?.open_tx != null) return answer(ctx, channelId, nonce, known.open_tx as Hash, 200);
  await checkSignature(ctx, req, token, nonce);
  policy.takePayer(req.payer);
  const early = await checkBeforeRelay(ctx, req, channelId, nonce);
  if (early !== undefined) return early;
  return sendOpen(ctx, req, channelId, nonce);
}
export function createChannelOpenService(ctx: ChannelOpenContext, policy: ChannelOpenPolicy) {
  const flights = new Map<string, Promise<ChannelOpenResult>>();

  return {
    /** Relays the open, or answers the channel it already opened. */
    open(req: ChannelOpenRequest): Promise<ChannelOpenResult> {
      const token = check(ctx, policy, req);
      const nonce = nonceOf(ctx, req);
      const running = flights.get(nonce);
      if (running !== undefined) return running.then((r) => ({ ...r, status: 200 as const }));
      const flight = relay(ctx, policy, req, token, nonce).finally(() => flights.delete(nonce));
      flights.set(nonce, flight);
      return flight;
    },
  };
}

export type ChannelOpenService = ReturnType<typeof createChannelOpenService>;
