/**
 * How a paid call ends: its receipt for the model (content and artifact) and its spend event, once
 * served (`answeredReceipt`) or failed (`failedReceipt`). A receipt's `amount` is what the call paid,
 * on success and on failure alike (src/agent/paidTool.ts, the budget invariant).
 */
import { formatUnitsExact } from "../../protocol/amount.ts";
import { isTollgateError, TollgateError } from "../../protocol/errors.ts";
import type { PolicyOffer } from "../policy/policyOffer.ts";
import type { RedeemableProof, RedeemableProofs } from "../redeemableProofs.ts";
import type { SpendMode } from "../spendReport.ts";
import type { ChoosingCall } from "./chooseOption.ts";
import type { PaidToolReceipt, RemoteCapability } from "./paidToolTypes.ts";
import { SellerError } from "./sellerError.ts";

/** A call as it ends (src/agent/paidTool/paidCall.ts). */
export type EndingCall = ChoosingCall & {
  readonly capability: RemoteCapability;
  readonly redeemed: RedeemableProof | undefined;
  readonly asideMode: SpendMode | undefined;
  readonly redeemable: RedeemableProofs;
  paidAside(): Promise<unknown>;
  sellerFailure(status: number, text: string): SellerError;
};

/** The seller served the call: what the parts say it cost, the receipt and the spend event. */
export async function answeredReceipt(
  call: EndingCall,
  response: Response,
  text: string,
): Promise<[string, PaidToolReceipt]> {
  const chosen = call.chosenScheme;
  let mode: SpendMode =
    call.asideMode ??
    (chosen !== undefined
      ? (chosen.purchase.servedMode ?? chosen.spendMode ?? "one-time")
      : call.paidOnce || call.redeemed !== undefined
        ? "one-time"
        : "free");
  let heldOffer: PolicyOffer | undefined;
  for (const { hooks } of call.parts) {
    if (hooks.served === undefined) continue;
    const served = await hooks.served(response, mode);
    mode = served.mode;
    heldOffer ??= served.offer;
  }
  call.spend.settleAllowance();
  const paid = call.spend.paid;
  // Served on a proof an earlier call paid for: its spend is in the ledger since that call.
  const redeemedNote =
    call.redeemed !== undefined && paid === 0n
      ? `redeemed a proof of ${call.redeemed.amount} USDC paid by an earlier call the seller failed`
      : undefined;
  if (redeemedNote !== undefined) call.transaction ??= call.redeemed?.transaction;
  const { name } = call.capability;
  const reason = redeemedNote ?? call.decision?.reason;
  const { provider, transaction, subscriptionId } = call;
  call.options.onSpend?.({
    tool: name,
    provider: provider ?? call.tool.origin,
    mode,
    amount: paid,
    reason,
    offer: call.offer ?? heldOffer,
    transaction,
    subscriptionId,
    ok: true,
  });
  return [
    text,
    { tool: name, mode, amount: formatUnitsExact(paid), provider, transaction, subscriptionId, reason },
  ];
}

/** The call failed (refused, unpaid, or the seller failed after being paid): settle, report, explain. */
export async function failedReceipt(call: EndingCall, thrown: unknown): Promise<[string, PaidToolReceipt]> {
  // The payer re-sent its proof and the seller kept failing: report it as the seller's answer.
  const error =
    isTollgateError(thrown, "PaidRequestFailed") && typeof thrown.details?.status === "number"
      ? call.sellerFailure(thrown.details.status, String(thrown.details.body ?? ""))
      : thrown;
  for (const { hooks } of call.parts) await hooks.unanswered?.();
  await call.spend.settleReservations().catch(() => undefined);
  await call.paidAside().catch(() => undefined);
  call.spend.settleAllowance();
  keepGivenBackProof(call, thrown);
  const code =
    error instanceof SellerError ? error.code : error instanceof TollgateError ? error.code : "Internal";
  const message = error instanceof Error ? error.message : String(error);
  const { name } = call.capability;
  const paidAmount = call.spend.paid;
  const chosen = call.chosenScheme;
  const settledMode = call.failureMode ?? call.asideMode;
  call.options.onSpend?.({
    tool: name,
    provider: call.provider ?? call.tool.origin,
    mode: settledMode ?? chosen?.spendMode ?? "one-time",
    amount: paidAmount,
    reason: call.decision?.reason,
    offer: call.offer,
    transaction: call.transaction,
    ok: false,
    error: code,
  });
  call.options.logger?.warn({ tool: name, code, err: error }, "paid tool call failed");
  const paid = paidAmount > 0n;
  return [
    `ERROR ${code}: ${message}`,
    {
      tool: name,
      mode: !paid ? "free" : (settledMode ?? chosen?.purchase.servedMode ?? chosen?.spendMode ?? "one-time"),
      amount: formatUnitsExact(paidAmount),
      provider: call.provider,
      transaction: call.transaction,
      subscriptionId: call.subscriptionId,
      reason: call.decision?.reason,
      error: { code, message },
      paid,
    },
  ];
}

/** The seller gave the proof back (5xx) and it is valid a while yet: the next call redeems it. */
function keepGivenBackProof(call: EndingCall, thrown: unknown): void {
  if (
    isTollgateError(thrown, "PaidRequestFailed") &&
    typeof thrown.details?.proof === "string" &&
    typeof thrown.details.redeemableUntil === "number"
  ) {
    call.redeemable.keep(call.target, {
      header: thrown.details.proof,
      exp: thrown.details.redeemableUntil,
      amount: formatUnitsExact(BigInt(String(thrown.details.amount ?? "0"))),
      transaction: typeof thrown.details.transaction === "string" ? thrown.details.transaction : undefined,
    });
  }
}
