/**
 * Proofs for gate tests: what a facilitator signs after settling the payment option a 402 offered.
 */
import type { Hex } from "viem";
import { type ProofKey, signPaymentProof } from "../../src/facilitator/proofKeys.ts";
import type { PaymentProof } from "../../src/protocol/paymentProof.ts";
import type { PaymentOption } from "../../src/protocol/paymentRequired.ts";

/** The payer the gate tests' proofs name. */
export const TEST_PAYER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
/** The settling transaction the gate tests' proofs name. */
export const TEST_TX: Hex = `0x${"ab".repeat(32)}`;

/**
 * Signs the proof of a settled payment of `option` with `key`, issued at `now` (unix seconds) and
 * valid for 300 s; `overrides` replace signed fields (other path, amount, expiry…) to forge attacks.
 */
export function signProofFor(
  key: ProofKey,
  option: PaymentOption,
  now: number,
  overrides: Partial<Omit<PaymentProof, "kid" | "sig">> = {},
): PaymentProof {
  return signPaymentProof(key, {
    v: "1",
    scheme: "exact",
    network: option.network,
    token: option.token,
    amount: option.amount,
    payer: TEST_PAYER,
    payTo: option.payTo,
    memo: option.memo,
    tx: TEST_TX,
    iat: now,
    exp: now + 300,
    ...overrides,
  });
}
