/**
 * The settlement engine's checks against the chain: a simulation of the transfer before a payment is
 * queued, how an authorization's nonce stands on chain, and the re-check a payment gets before it is
 * retried. Reads only; nothing here writes.
 */
import { type Address, BaseError, type Hash, type PublicClient, parseEventLogs } from "viem";
import { SETTLER_ITEM_GAS } from "../../chain/actions/settler/settle.ts";
import { getAuthorizationState } from "../../chain/actions/usd/getAuthorizationState.ts";
import { getAuthorizationUsedLogs } from "../../chain/actions/usd/getAuthorizationUsedLogs.ts";
import { simulateTransferWithAuthorization } from "../../chain/actions/usd/simulateTransferWithAuthorization.ts";
import { fiatTokenV2_2Abi } from "../../chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import { type Clock, unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { nameBlacklistedAccount } from "../blacklistRefusal.ts";
import { isChainUnreachable, toChainError } from "../chainErrors.ts";
import {
  type CheckablePayment,
  checkSignedPayment,
  type SupportedTokenConfig,
} from "../checkSignedPayment.ts";
import type { ContractSigners } from "../contractSigners.ts";
import type { PaymentRow } from "../paymentRecords.ts";

export type PaymentCheckClient = Pick<
  PublicClient,
  "simulateContract" | "readContract" | "getLogs" | "getBlockNumber" | "getTransactionReceipt"
>;

/** Seconds an authorization must still be valid for when it is checked (it must survive its batch). */
export const MIN_REMAINING_SECONDS = 6;
/**
 * Gas a simulation may use: the settler's per-item cap plus the transaction's own intrinsic and calldata
 * cost. A payer whose wallet needs more could never settle in a batch, so it is refused up front.
 */
const SIMULATION_GAS = SETTLER_ITEM_GAS + 40_000n;
/**
 * Blocks searched backwards for the transaction that used an authorization's nonce. A payment waits in
 * the queue for seconds; a day of Base blocks is ample and within what RPC providers serve.
 */
const AUTHORIZATION_LOG_LOOKBACK = 50_000n;

/** How an authorization's nonce stands on chain. */
export type OnChainUse =
  | { kind: "unused" }
  | { kind: "matched"; hash: Hash; blockNumber: bigint }
  | { kind: "other" };

export type Recheck =
  | { kind: "ok" }
  | { kind: "settled"; hash: Hash; blockNumber: bigint }
  | { kind: "failed"; error: TollgateError };

export type PaymentChecks = {
  /** The off-chain checks (checkSignedPayment.ts), at the clock's now. */
  checkOffChain(payment: CheckablePayment): Promise<Address>;
  /** Simulates the transfer as the settler would make it; throws the refusal as a `TollgateError`. */
  simulate(payment: CheckablePayment): Promise<void>;
  onChainUse(row: PaymentRow): Promise<OnChainUse>;
  /** Checks a row again before it is retried; throws only when the chain cannot be reached. */
  recheck(row: PaymentRow): Promise<Recheck>;
  /** `refusal` of `row`, with the blacklisted payer or payee named when it is `AccountBlacklisted`. */
  nameBlacklisted(row: PaymentRow, refusal: TollgateError): Promise<TollgateError>;
};

export function createPaymentChecks(options: {
  client: PaymentCheckClient;
  network: string;
  tokens: ReadonlyMap<string, SupportedTokenConfig>;
  batchSettler: Address;
  clock: Clock;
  /** Wallet payers' signatures, checked through the chain (contractSigners.ts). */
  contractSigners?: ContractSigners | undefined;
}): PaymentChecks {
  const { client, clock } = options;
  const chain: ChainCheckContext = { client, batchSettler: options.batchSettler, clock };
  return {
    checkOffChain: (payment) =>
      checkSignedPayment(
        {
          network: options.network,
          tokens: options.tokens,
          nowSeconds: unixSeconds(clock),
          minRemainingSeconds: MIN_REMAINING_SECONDS,
          contractSigners: options.contractSigners,
        },
        payment,
      ),
    simulate: (payment) => simulate(chain, payment),
    onChainUse: (row) => onChainUse(client, row),
    nameBlacklisted: (row, refusal) =>
      nameBlacklistedAccount(client, refusal, {
        token: row.token as Address,
        parties: { payer: row.payer, payee: row.pay_to },
      }),
    recheck: (row) => recheck(chain, row),
  };
}

/** What the chain checks read through: the client, the settler that sends the transfers, the clock. */
type ChainCheckContext = { client: PaymentCheckClient; batchSettler: Address; clock: Clock };

/**
 * Simulates on the latest block, and on the pending block only when the latest one is older than the
 * authorization's validAfter (an idle devnet mines no block for minutes). A node builds the pending
 * block for every call made on it: anvil executes the settlements waiting for the next block again
 * each time (at 512 payers on 2 s blocks that took it over a core, and its batches of simulations
 * 0.3-1.1 s), and many providers answer `pending` as `latest` anyway. What the pending block would
 * add, a payer's spends already on their way, is not what this check is for: the settler fails such
 * a transfer alone in its batch.
 */
async function simulateOn(
  { client, batchSettler }: ChainCheckContext,
  payment: CheckablePayment,
  blockTag: "latest" | "pending",
): Promise<void> {
  const a = payment.authorization;
  await simulateTransferWithAuthorization(client, {
    token: payment.token as Address,
    authorization: {
      from: a.from,
      to: a.to,
      value: BigInt(a.value),
      validAfter: BigInt(a.validAfter),
      validBefore: BigInt(a.validBefore),
      nonce: a.nonce,
    },
    signature: payment.signature,
    account: batchSettler,
    gas: SIMULATION_GAS,
    blockTag,
  });
}

async function simulate(chain: ChainCheckContext, payment: CheckablePayment): Promise<void> {
  try {
    try {
      await simulateOn(chain, payment, "latest");
    } catch (error) {
      if (!isNotYetValid(error)) throw error;
      await simulateOn(chain, payment, "pending");
    }
  } catch (error) {
    if (!isChainUnreachable(error) && isOutOfGas(error)) {
      throw new TollgateError(
        "InvalidSignature",
        "the payer's wallet needs more gas to check its signature than a settlement allows",
        { cause: error, details: { gasLimit: SETTLER_ITEM_GAS.toString() } },
      );
    }
    // A blacklisted payer or payee is named here, on the refusal path only (blacklistRefusal.ts).
    const a = payment.authorization;
    throw await nameBlacklistedAccount(chain.client, toChainError(error), {
      token: payment.token as Address,
      parties: { payer: a.from, payee: a.to },
    });
  }
}

/**
 * `matched` names the transaction that moved exactly this payment (the token's `AuthorizationUsed` for
 * (payer, nonce) followed, in the same transaction, by its `Transfer` of (payer, payTo, amount));
 * `other` means the nonce went to something else (another authorization the payer signed with the same
 * nonce, a cancellation) or its log is out of reach.
 */
async function onChainUse(client: PaymentCheckClient, row: PaymentRow): Promise<OnChainUse> {
  const token = row.token as Address;
  const used = await getAuthorizationState(client, { token, authorizer: row.payer, nonce: row.nonce });
  if (!used) return { kind: "unused" };
  const latest = await client.getBlockNumber();
  const logs = await getAuthorizationUsedLogs(client, {
    token,
    authorizer: row.payer,
    nonce: row.nonce,
    fromBlock: latest > AUTHORIZATION_LOG_LOOKBACK ? latest - AUTHORIZATION_LOG_LOOKBACK : 0n,
    toBlock: latest,
  });
  const used0 = logs[0];
  if (used0 === undefined || used0.transactionHash === null || used0.blockNumber === null) {
    // Used, yet no log up to the head read after: the chain changed between the two reads (a
    // reorganisation took the use back). At that head the nonce may be free again; then it is unused,
    // and the payment goes again (a use that comes back is matched then), never failed on this view.
    const usedAtHead = await getAuthorizationState(client, {
      token,
      authorizer: row.payer,
      nonce: row.nonce,
      blockNumber: latest,
    });
    return usedAtHead ? { kind: "other" } : { kind: "unused" };
  }
  const receipt = await client.getTransactionReceipt({ hash: used0.transactionHash });
  const transfer = parseEventLogs({
    abi: fiatTokenV2_2Abi,
    logs: receipt.logs,
    eventName: "Transfer",
  }).find((log) => log.address.toLowerCase() === row.token && (log.logIndex ?? 0) > (used0.logIndex ?? 0));
  const matches =
    transfer !== undefined &&
    transfer.args.from.toLowerCase() === row.payer &&
    transfer.args.to.toLowerCase() === row.pay_to &&
    transfer.args.value === row.amount;
  return matches
    ? { kind: "matched", hash: receipt.transactionHash, blockNumber: receipt.blockNumber }
    : { kind: "other" };
}

async function recheck(chain: ChainCheckContext, row: PaymentRow): Promise<Recheck> {
  const use = await onChainUse(chain.client, row);
  if (use.kind === "matched") return { kind: "settled", hash: use.hash, blockNumber: use.blockNumber };
  if (use.kind === "other") {
    return {
      kind: "failed",
      error: new TollgateError("NonceAlreadyUsed", "this authorization's nonce was already used on chain"),
    };
  }
  if (row.valid_before <= BigInt(unixSeconds(chain.clock) + MIN_REMAINING_SECONDS)) {
    return {
      kind: "failed",
      error: new TollgateError(
        "AuthorizationExpired",
        "the authorization expired before it could be settled",
      ),
    };
  }
  try {
    await simulate(chain, checkableOf(row));
    return { kind: "ok" };
  } catch (error) {
    if (error instanceof TollgateError && error.code !== "ChainUnavailable") return { kind: "failed", error };
    throw error;
  }
}

/** The signed payment a row holds, as the checks take it. */
export function checkableOf(row: PaymentRow): CheckablePayment {
  return {
    network: row.network,
    token: row.token,
    memo: row.memo ?? undefined,
    authorization: {
      from: row.payer,
      to: row.pay_to,
      value: row.amount.toString(),
      validAfter: row.valid_after.toString(),
      validBefore: row.valid_before.toString(),
      nonce: row.nonce,
    },
    signature: row.signature,
  };
}

/** True when a call or simulation ran out of gas (a wallet that burns what it is given, say). */
function isOutOfGas(error: unknown): boolean {
  if (!(error instanceof BaseError)) return false;
  let text = "";
  error.walk((e) => {
    text += ` ${(e as Error).message} ${String((e as { details?: unknown }).details ?? "")}`;
    return false;
  });
  return /out of gas|OutOfGas|gas required exceeds|gas uint64 overflow/i.test(text);
}

/** Whether a simulation reverted because the block is not past the authorization's validAfter. */
function isNotYetValid(error: unknown): boolean {
  if (isChainUnreachable(error)) return false;
  const revert = toChainError(error).details?.revert;
  return typeof revert === "string" && /NotYetValid|not yet valid/i.test(revert);
}
