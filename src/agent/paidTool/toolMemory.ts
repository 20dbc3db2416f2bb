/**
 * What a paid tool keeps between its calls: proofs it paid for that a failing seller gave back, and
 * the payments whose answer was lost, read back before the next call (src/agent/redeemableProofs.ts,
 * src/agent/budget/pendingPayments.ts, src/agent/budget/storedProofs.ts).
 *
 * Payments of this agent whose outcome is unknown (a lost `/authorize` answer) are read back before
 * each call, one resolution at a time. A payment of this tool whose answer was lost in this process
 * was never presented to its seller: once read back as settled, its proof is kept for the next call to
 * the same target, which redeems it instead of paying again — so that call waits for the read-back.
 * Otherwise the read-back runs in the background: a call does not wait for a facilitator that may be
 * down.
 */
import type { Logger } from "pino";
import type { ReadClient } from "../../chain/clientTypes.ts";
import type { Payer } from "../../client/createPayer.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import type { Clock } from "../../protocol/clock.ts";
import type { BudgetLedger } from "../budget/createBudgetLedger.ts";
import { resolvePendingPayments } from "../budget/pendingPayments.ts";
import { takeStoredProof } from "../budget/storedProofs.ts";
import {
  createRedeemableProofs,
  REDEEM_MARGIN_SECONDS,
  type RedeemableProof,
  type RedeemableProofs,
} from "../redeemableProofs.ts";

/** Lost payments whose target a tool remembers for redemption: a flaky facilitator cannot grow it unbounded. */
const MAX_LOST_TARGETS = 64;

export type ToolMemory = {
  /** Proofs paid for and given back by a failing seller: the next call to the same target redeems one. */
  readonly redeemable: RedeemableProofs;
  /** Reads back the agent's pending payments; waits for it only when a payment of this tool was lost. */
  readBack(): Promise<void>;
  /** Notes the target of a payment whose answer was lost, so the next call waits for its read-back. */
  lost(nonce: string, target: string): void;
  /** A proof for `target` to present instead of paying: one given back in this process, else one kept in the store. */
  proofFor(target: string): Promise<RedeemableProof | undefined>;
};

export function createToolMemory(options: {
  agent: string;
  payer: Payer;
  budget: BudgetLedger;
  clock: Clock;
  chain: ReadClient | undefined;
  logger: Pick<Logger, "warn"> | undefined;
}): ToolMemory {
  const { agent, payer, budget, clock, logger } = options;
  const redeemable = createRedeemableProofs();
  /** The request target of each payment of this tool whose answer was lost, by authorization nonce. */
  const lostTargets = new Map<string, string>();
  let resolving: Promise<unknown> | undefined;
  const resolvePending = (): Promise<unknown> => {
    if (typeof payer.payment !== "function") return Promise.resolve();
    resolving ??= resolvePendingPayments({ agent, budget, payer, clock, chain: options.chain })
      .then((resolved) => {
        // A settled one's proof is now in the agent's store (storedProofs.ts), for the next call.
        for (const r of resolved) if (r.outcome !== "pending") lostTargets.delete(r.nonce.toLowerCase());
      })
      .catch((error: unknown) => logger?.warn({ err: error }, "pending payments not read back"))
      .finally(() => {
        resolving = undefined;
      });
    return resolving;
  };
  /**
   * A proof of a lost-answer payment to `target` that settled later, kept in the agent's store by
   * whichever process read it back (storedProofs.ts); a store that cannot answer redeems nothing.
   */
  const takeKeptProof = async (target: string): Promise<RedeemableProof | undefined> => {
    const kept = await takeStoredProof(budget.store, {
      agent,
      target,
      minExp: Math.floor(clock.now() / 1000) + REDEEM_MARGIN_SECONDS,
    }).catch((error: unknown) => {
      logger?.warn({ err: error }, "kept proofs not read");
      return undefined;
    });
    if (kept === undefined) return undefined;
    return {
      header: kept.header,
      exp: kept.exp,
      amount: formatUnitsExact(kept.amount),
      transaction: kept.transaction,
    };
  };
  return {
    redeemable,
    async readBack() {
      const pendingRead = resolvePending();
      if (lostTargets.size > 0) await pendingRead;
    },
    lost(nonce, target) {
      if (lostTargets.size < MAX_LOST_TARGETS) lostTargets.set(nonce.toLowerCase(), target);
    },
    async proofFor(target) {
      return redeemable.take(target, clock.now()) ?? (await takeKeptProof(target));
    },
  };
}
