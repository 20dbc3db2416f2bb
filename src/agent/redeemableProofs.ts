/**
 * Proofs a paid tool paid for and could not use: the seller failed (5xx) after the payment, kept
 * failing while the payer re-sent the proof, and so gave it back (docs/gate.md, "A failed handler gives
 * the proof back"). Such a proof stays redeemable at that seller until its `exp`; the next call of the
 * same request target sends it instead of paying again. A memo binds method, path and query, not the
 * body, so any later call to the same target may redeem it.
 *
 * Invariant: a kept proof is handed out to one call at a time (`take` removes it), and is only put
 * back when that call was answered 5xx again, so two calls never present the same proof at once.
 */
export type RedeemableProof = {
  /** The `X-PAYMENT` header value. */
  header: string;
  /** Unix seconds after which the gate refuses it. */
  exp: number;
  amount: string;
  transaction?: string | undefined;
};

export type RedeemableProofs = {
  keep(target: string, proof: RedeemableProof): void;
  /** A kept proof for `target` still valid for `marginSeconds`, removed from the store. */
  take(target: string, nowMs: number): RedeemableProof | undefined;
  size(): number;
};

/** Seconds a kept proof must still be valid to be worth sending (a request and a retry fit in it). */
export const REDEEM_MARGIN_SECONDS = 30;
/** Kept proofs per tool: a seller that fails every call cannot make the agent hold unbounded state. */
const MAX_KEPT = 64;

export function createRedeemableProofs(): RedeemableProofs {
  const kept = new Map<string, RedeemableProof[]>();
  let count = 0;
  return {
    keep(target, proof) {
      if (count >= MAX_KEPT) return;
      const list = kept.get(target) ?? [];
      list.push(proof);
      kept.set(target, list);
      count++;
    },
    take(target, nowMs) {
      const list = kept.get(target);
      while (list !== undefined && list.length > 0) {
        const proof = list.shift()!;
        count--;
        if (list.length === 0) kept.delete(target);
        if (proof.exp * 1000 > nowMs + REDEEM_MARGIN_SECONDS * 1000) return proof;
      }
      return undefined;
    },
    size: () => count,
  };
}
