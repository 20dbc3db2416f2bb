/**
 * Payments whose outcome is unknown (docs/budgets.md, "Payments whose answer was lost"): an agent signed
 * an authorization and sent it to `/authorize`, and no answer came back — a timeout, a 503, a
 * connection cut after the facilitator had queued or even settled it. Releasing its reservation then
 * would let the ledger forget money that moved, so the payment is held (`ledger.pend`) and read back by
 * its nonce (`GET /payments/:nonce`, signed by the payer), as a plain payer recovers it:
 *
 * - settled → the reservation is committed (the spend is recorded);
 * - failed, or unknown to the facilitator → released, but only once the authorization's `validBefore`
 *   has passed (plus `skewSeconds` for the chain's clock): before that, a request still in flight at a
 *   facilitator instance, or a resend, could settle it;
 * - pending or submitted, or the facilitator unreachable → held; the next resolution asks again.
 *
 * A payment to a standard x402 server (`token` set) is settled by the seller's facilitator, not
 * Tollgate's: it is read back from the chain instead, as the token's EIP-3009
 * `authorizationState(payer, nonce)` — used → committed; unused once `validBefore` (plus the skew) has
 * passed → released (no transfer can use it any more); otherwise, or without a chain to read, held.
 *
 * Resolution runs right after the failure (a few read-backs: the answer is often only lost, and the
 * call then goes on with the proof), before each later call of a paid tool, at a run's end and in the
 * subscription keeper's sync, in any process that shares the agent's store and wallet.
 */
import type { Address, Hex } from "viem";
import { getAuthorizationState } from "../../chain/actions/usd/getAuthorizationState.ts";
import type { ReadClient } from "../../chain/clientTypes.ts";
import type { PaymentReceipt } from "../../client/payerTypes.ts";
import { sameAddress } from "../../protocol/address.ts";
import { type Clock, unixSeconds } from "../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../protocol/errors.ts";
import type { PaymentRecord } from "../../protocol/facilitator.ts";
import { encodeJsonHeader } from "../../protocol/header.ts";
import { memoNonce, splitMemo } from "../../protocol/memo.ts";
import type { PaymentProof } from "../../protocol/paymentProof.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import type { BudgetLedger, PendingPayment, Reservation } from "./createBudgetLedger.ts";
import { keepStoredProof } from "./storedProofs.ts";

/** What reading a payment back needs of a payer: `createPayer`'s `address` and `payment(nonce)`. */
export type PaymentReader = { address: Address; payment(nonce: Hex): Promise<PaymentRecord> };

/** The longest validity a payer signs (createPayer's `validForSeconds` is at most this). */
const MAX_VALID_FOR_SECONDS = 3600;
/** Seconds past `validBefore` before "never settled" is believed (the chain's clock may lag ours). */
const DEFAULT_SKEW_SECONDS = 60;

export type PendingResolution = {
  spendId: string;
  nonce: Hex;
  amount: bigint;
  outcome: "settled" | "released" | "pending";
  transaction?: string | undefined;
  /**
   * The facilitator's proof of a settled payment: the call whose answer was lost never presented it,
   * so the seller was paid and did not serve — the next call to the same target can redeem it.
   */
  proof?: PaymentProof | undefined;
};

/** The read-back: the record, `"absent"` (the facilitator has none), or `undefined` (no answer). */
async function readBack(payer: PaymentReader, nonce: Hex): Promise<PaymentRecord | "absent" | undefined> {
  try {
    return await payer.payment(nonce);
  } catch (error) {
    if (isTollgateError(error, "NotFound")) return "absent";
    return undefined;
  }
}

/**
 * Resolves one pending payment by reading it back: commits or releases its reservation, or leaves it.
 */
export async function resolvePendingPayment(
  budget: BudgetLedger,
  payer: PaymentReader,
  pending: Pick<PendingPayment, "spendId" | "nonce" | "validBefore" | "amount" | "target"> & {
    agent?: string | undefined;
    /** Needed to read an x402 payment (`token`) back from the chain. */
    payer?: Address | undefined;
    token?: Address | undefined;
  },
  options: { clock: Clock; skewSeconds?: number | undefined; chain?: ReadClient | undefined },
): Promise<PendingResolution> {
  const base = { spendId: pending.spendId, nonce: pending.nonce as Hex, amount: pending.amount };
  const expired =
    unixSeconds(options.clock) > pending.validBefore + (options.skewSeconds ?? DEFAULT_SKEW_SECONDS);
  if (pending.token !== undefined) {
    // An x402 payment: only the chain knows (a failed read leaves it held).
    if (options.chain === undefined || pending.payer === undefined) return { ...base, outcome: "pending" };
    const used = await getAuthorizationState(options.chain, {
      token: pending.token,
      authorizer: pending.payer,
      nonce: pending.nonce as Hex,
    }).catch(() => undefined);
    if (used === true) {
      await budget.commit({ id: pending.spendId }, pending.amount);
      return { ...base, outcome: "settled" };
    }
    if (used === false && expired) {
      const outcome = await budget.release({ id: pending.spendId });
      return { ...base, outcome: outcome.status === "committed" ? "settled" : "released" };
    }
    return { ...base, outcome: "pending" };
  }
  const record = await readBack(payer, pending.nonce as Hex);
  if (record !== undefined && record !== "absent" && record.status === "settled") {
    // The facilitator records what the transfer moved: the reserved amount (the authorization's value).
    const paid = BigInt(record.amount) < pending.amount ? BigInt(record.amount) : pending.amount;
    // Its proof never reached the seller: kept for the next call to the same target, in any process
    // (storedProofs.ts) — before the commit, which forgets the pending row and its target.
    if (record.proof !== undefined && pending.target !== undefined && pending.agent !== undefined) {
      await keepStoredProof(budget.store, {
        agent: pending.agent,
        target: pending.target,
        nonce: pending.nonce,
        proof: {
          header: encodeJsonHeader(record.proof),
          exp: record.proof.exp,
          amount: BigInt(record.proof.amount),
          transaction: record.proof.tx,
        },
        now: new Date(options.clock.now()),
      });
    }
    await budget.commit({ id: pending.spendId }, paid);
    return {
      ...base,
      outcome: "settled",
      transaction: record.transaction ?? undefined,
      ...(record.proof === undefined ? {} : { proof: record.proof }),
    };
  }
  const neverSettled = record === "absent" || (record !== undefined && record.status === "failed");
  if (expired && neverSettled) {
    const outcome = await budget.release({ id: pending.spendId });
    // Another process may have committed it meanwhile: then it settled.
    return { ...base, outcome: outcome.status === "committed" ? "settled" : "released" };
  }
  return { ...base, outcome: "pending" };
}

/**
 * Resolves every pending payment of `agent` made from `payer`'s wallet (others' cannot be read back by
 * this payer). Never throws for a payment the facilitator cannot answer about: it stays pending.
 * `chain` reads x402 payments back (without it they stay held).
 *
 * @example
 * const resolved = await resolvePendingPayments({ agent: "researcher", budget, payer, clock });
 */
export async function resolvePendingPayments(options: {
  agent: string;
  budget: BudgetLedger;
  payer: PaymentReader;
  clock: Clock;
  skewSeconds?: number | undefined;
  chain?: ReadClient | undefined;
}): Promise<PendingResolution[]> {
  const pending = await options.budget.pendingPayments(options.agent);
  const resolved: PendingResolution[] = [];
  for (const p of pending) {
    if (!sameAddress(p.payer, options.payer.address)) continue;
    try {
      resolved.push(await resolvePendingPayment(options.budget, options.payer, p, options));
    } catch {
      // A commit racing a release in another process: the next resolution sees the outcome.
      resolved.push({ spendId: p.spendId, nonce: p.nonce, amount: p.amount, outcome: "pending" });
    }
  }
  return resolved;
}

/**
 * Payer-side refusals before anything was signed or sent, and the facilitator's own refusals: nothing
 * can settle after these unless a read-back says otherwise.
 */
const REFUSED_BEFORE_SENDING: ReadonlySet<string> = new Set([
  "PriceCeilingExceeded",
  "UnsupportedNetwork",
  "UnsupportedToken",
  "BudgetExceeded",
  "ApprovalDenied",
  "OfferMismatch",
]);
/** Failures after which the facilitator may have acted (no answer, or an answer we cannot trust). */
function outcomeUnknown(error: unknown): boolean {
  if (!(error instanceof TollgateError)) return true;
  return (
    error.code === "ChainUnavailable" || error.code === "Internal" || error.code === "InvalidPaymentProof"
  );
}

export type RecoverPaymentOptions = {
  agent: string;
  budget: BudgetLedger;
  payer: PaymentReader;
  clock: Clock;
  wait: (ms: number) => Promise<void>;
  /** The paid request's method and URL: a payment held pending keeps it, so its proof can be redeemed. */
  target?: string | undefined;
  /** Read-backs right after the failure (default 5), `retryMs` apart (default 1 000). */
  attempts?: number | undefined;
  retryMs?: number | undefined;
  /**
   * The schemes the agent pays with: whose payments can be read back. Given by the caller, not
   * defaulted here: the subscription keeper reads pending payments back through this module, so it
   * must not load the agent's list of built-ins (whose parts load the keeper).
   */
  schemes: AgentSchemes;
};

/**
 * After `pay(option)` failed with `error`: reads the payment back by nonce. Resolves the receipt when it
 * settled after all (the call goes on with its proof); otherwise rethrows — having first marked
 * `reservation` pending when the outcome is unknown (then the error says so: `details.pending`), so the
 * caller must not release it.
 */
export async function recoverPayment(
  option: PaymentOption,
  error: unknown,
  reservation: Reservation,
  options: RecoverPaymentOptions,
): Promise<PaymentReceipt> {
  const { schemes } = options;
  if (
    schemes.offer(option.scheme)?.readsBack !== true ||
    (error instanceof TollgateError && REFUSED_BEFORE_SENDING.has(error.code))
  ) {
    throw error;
  }
  const nonce = memoNonce(option.memo);
  const unknown = outcomeUnknown(error);
  const attempts = unknown ? (options.attempts ?? 5) : 1;
  let last: PaymentRecord | "absent" | undefined;
  for (let i = 0; i < attempts; i++) {
    if (i > 0) await options.wait(options.retryMs ?? 1_000);
    last = await readBack(options.payer, nonce);
    if (last !== undefined && last !== "absent" && last.status === "settled" && last.proof !== undefined) {
      return { option, proof: last.proof, header: encodeJsonHeader(last.proof), settled: undefined };
    }
    if (last !== undefined && last !== "absent" && last.status === "failed") break;
  }
  // A refusal the facilitator answered, and nothing queued or queued and failed: nothing will settle.
  const inFlight = last !== undefined && last !== "absent" && last.status !== "failed";
  if (!unknown && !inFlight) throw error;
  // Outcome unknown: held until read back. A payer signs validBefore within the offer's expiry and at
  // most MAX_VALID_FOR_SECONDS from now (createPayer): the smaller bounds it.
  await options.budget.pend(reservation, {
    payer: options.payer.address,
    nonce,
    target: options.target,
    validBefore: Math.min(
      splitMemo(option.memo).payload.e,
      unixSeconds(options.clock) + MAX_VALID_FOR_SECONDS,
    ),
  });
  const message = error instanceof Error ? error.message : String(error);
  throw new TollgateError(
    "ChainUnavailable",
    `${message}; the payment's outcome is unknown: it stays held in the budget until it is read back`,
    { details: { pending: true, nonce, amount: option.amount }, cause: error },
  );
}
