/**
 * The rows of one outbox worker that wait for the chain's fee to come back under the operator's maximum
 * (`maxFeePerGas`, TOLLGATE_MAX_FEE_GWEI): a fee bump would pass the ceiling, or the node refuses the
 * row's fee as below the block's base fee. Such a row is not dropped and no payment in it fails: it
 * keeps its nonce and its recorded bytes, and is mined once the base fee falls (rowDriver.ts).
 *
 * An episode runs from the first row held to the moment none is: one warning when it begins and one
 * line when it ends, however many rows and bump rounds it spans (the per-row lines are `debug`).
 */
import type { Logger } from "pino";
import type { Clock } from "../../protocol/clock.ts";

/** What `/healthz`, the metrics and `tollgate facilitator status` say of a hold. */
export type FeeHoldState = {
  /** Rows of this worker waiting for the fee. */
  rows: number;
  /** When the episode began. */
  since: Date;
  /** The operator's maximum `maxFeePerGas`. */
  ceiling: bigint;
  /** The latest block's base fee when a row was last held, if known. */
  baseFee: bigint | undefined;
};

export type FeeHold = {
  /** Marks a row as waiting for the fee; the first of an episode is logged. */
  hold(id: number, baseFee: bigint | undefined): void;
  /** The row no longer waits for the fee (its outcome is recorded, or a bump fit under the ceiling). */
  release(id: number): void;
  has(id: number): boolean;
  /** The episode now, or `undefined` when no row waits for the fee. */
  state(): FeeHoldState | undefined;
};

export function createFeeHold(options: {
  ceiling: bigint | undefined;
  clock: Clock;
  logger: Logger;
}): FeeHold {
  const { ceiling, clock, logger } = options;
  const held = new Set<number>();
  let since = 0;
  let baseFee: bigint | undefined;
  /** Rows held in the episode so far (the end line says how many waited). */
  let episodeRows = 0;
  return {
    hold(id, fee) {
      if (ceiling === undefined) return;
      if (fee !== undefined) baseFee = fee;
      if (held.has(id)) return;
      held.add(id);
      episodeRows++;
      if (held.size > 1) return;
      since = clock.now();
      logger.warn(
        {
          event: "fees.held",
          baseFeePerGas: baseFee?.toString(),
          maxFeePerGas: ceiling.toString(),
        },
        "the chain's fee is above the maximum fee (TOLLGATE_MAX_FEE_GWEI): transactions wait, unmined, until it falls under it",
      );
    },
    release(id) {
      if (!held.delete(id) || held.size > 0) return;
      logger.info(
        { event: "fees.released", waitedMs: clock.now() - since, rows: episodeRows },
        "the transactions that waited for the fee to fall under the maximum fee are mined or on their way",
      );
      episodeRows = 0;
    },
    has: (id) => held.has(id),
    state() {
      if (held.size === 0 || ceiling === undefined) return undefined;
      return { rows: held.size, since: new Date(since), ceiling, baseFee };
    },
  };
}
