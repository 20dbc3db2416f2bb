/** A seller's error answer to a (paid) request, as a paid tool reports it to the model. */
import { formatUnitsExact } from "../../protocol/amount.ts";

/**
 * A seller answered the (paid) request with an error. Its code is the seller's, which need not be
 * one of ours (`HTTP502` when the body names none), so it is not a `TollgateError`.
 */
export class SellerError extends Error {
  override readonly name = "SellerError";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** What the call had paid when the seller failed, for the message. */
export type PaidSoFar = { paid: bigint; pending: bigint; transaction: string | undefined };

/** The seller answered an error: its code and message, and what it was paid for the call. */
export function sellerFailure(tool: string, status: number, text: string, spent: PaidSoFar): SellerError {
  const seller = errorOf(text);
  const code = seller?.code ?? `HTTP${status}`;
  const paidNote =
    spent.paid > 0n
      ? ` after being paid ${formatUnitsExact(spent.paid)} USDC${spent.transaction === undefined ? "" : ` (transaction ${spent.transaction})`}`
      : spent.pending > 0n
        ? ` after being sent a payment of ${formatUnitsExact(spent.pending)} USDC, held in the budget until it is known whether it settled`
        : "";
  return new SellerError(
    code,
    `${tool} answered ${status} ${code}${paidNote}${seller?.message === undefined ? "" : `: ${seller.message}`}`,
  );
}

/** The code and message of an error body (a gate's `{error, message}` or `{error: {code, message}}`). */
function errorOf(body: string): { code: string; message: string | undefined } | undefined {
  try {
    const parsed = JSON.parse(body) as { error?: unknown; message?: unknown };
    const text = (value: unknown) => (typeof value === "string" ? value.slice(0, 300) : undefined);
    if (typeof parsed.error === "string" && /^[A-Za-z][A-Za-z0-9]{0,63}$/.test(parsed.error)) {
      return { code: parsed.error, message: text(parsed.message) };
    }
    if (typeof parsed.error === "object" && parsed.error !== null) {
      const { code, message } = parsed.error as { code?: unknown; message?: unknown };
      if (typeof code === "string" && /^[A-Za-z][A-Za-z0-9]{0,63}$/.test(code)) {
        return { code, message: text(message) };
      }
    }
  } catch {
    // not JSON
  }
  return undefined;
}
