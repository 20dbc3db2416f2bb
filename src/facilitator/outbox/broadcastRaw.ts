/**
 * Broadcasts a signed transaction and classifies the node's answer — the one copy of this logic. A node
 * that already has the transaction, or mined it, is not an error: the caller goes on to its receipt.
 */
import type { Hex, PublicClient } from "viem";
import { isChainUnreachable } from "../chainErrors.ts";

export type BroadcastResult =
  /** Accepted now, or the node already had it. */
  | { kind: "sent" }
  /** The account nonce is used: this transaction was mined, or another took its nonce. */
  | { kind: "nonce-used" }
  /**
   * Refused for now: its `maxFeePerGas` is below the base fee of the block being built (anvil and some
   * nodes say so where geth keeps it in its pool). It can be mined once the base fee falls under it.
   */
  | { kind: "underpriced"; message: string }
  /** Refused for good (funds for gas, a malformed or underpriced transaction). */
  | { kind: "refused"; message: string };

export async function broadcastRaw(
  client: Pick<PublicClient, "sendRawTransaction">,
  raw: Hex,
): Promise<BroadcastResult> {
  try {
    await client.sendRawTransaction({ serializedTransaction: raw });
    return { kind: "sent" };
  } catch (error) {
    if (isChainUnreachable(error)) throw error;
    const text =
      error instanceof Error
        ? `${error.message} ${String((error as { details?: unknown }).details ?? "")}`
        : "";
    if (/already known|already imported|known transaction|already in (the )?mempool/i.test(text)) {
      return { kind: "sent" };
    }
    if (/nonce too low|nonce has already been used|NonceTooLow|nonce is too low/i.test(text)) {
      return { kind: "nonce-used" };
    }
    const message = text.trim().slice(0, 500) || "refused by the node";
    if (
      /max fee per gas less than (the )?block base fee|fee cap (is )?(too low|less than)|FeeCapTooLow/i.test(
        text,
      )
    ) {
      return { kind: "underpriced", message };
    }
    return { kind: "refused", message };
  }
}
