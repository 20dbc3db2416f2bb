/**
 * The gate's replay key for a one-time payment (docs/protocol.md, "Payment proof"): the EIP-3009 authorization that moved
 * the money, whichever scheme presents it.
 *
 * Invariant: one transfer has one key. A Tollgate proof (`X-PAYMENT`) and an x402 payload
 * (`PAYMENT-SIGNATURE`) carrying the same authorization map to the same key, so the transfer buys one
 * response at a gate (and at every instance sharing its replay guard) however it is presented. The key
 * names what the token itself refuses to use twice — the authorizer's nonce on one token contract
 * (EIP-3009 nonces are per authorizer and token) on one network — so a stranger who signs their own
 * authorization with someone else's nonce gets their own key and cannot use up theirs.
 */
import type { Address, Hex } from "viem";
import { memoNonce } from "../protocol/memo.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentProof } from "../protocol/paymentProof.ts";

/** The authorization a payment was made with, as far as its replay key needs it. */
export type ReplayKeyAuthorization = {
  network: Network;
  token: Address;
  /** `authorization.from`. */
  payer: Address;
  /** `authorization.nonce`: for a Tollgate payment `keccak256(utf8(memo))` (docs/protocol.md, "Signed payment"). */
  nonce: Hex;
};

/**
 * `eip3009:<network>:<token>:<payer>:<nonce>`, addresses and nonce in lower case.
 *
 * @example
 * paymentReplayKey({ network: "eip155:8453", token: usdc, payer: authorization.from, nonce: authorization.nonce });
 */
export function paymentReplayKey(payment: ReplayKeyAuthorization): string {
  return `eip3009:${payment.network}:${payment.token.toLowerCase()}:${payment.payer.toLowerCase()}:${payment.nonce.toLowerCase()}`;
}

/** The replay key of a Tollgate proof: its payment's authorization, whose nonce the memo fixes. */
export function proofReplayKey(proof: Pick<PaymentProof, "network" | "token" | "payer" | "memo">): string {
  return paymentReplayKey({
    network: proof.network,
    token: proof.token,
    payer: proof.payer,
    nonce: memoNonce(proof.memo),
  });
}
