/**
 * The outbox a facilitator worker sends through: the facilitator's own (`ctx.outbox`) when the worker
 * shares its store, else one of its own over the worker's store with the same gas key (a worker built
 * over another store, as tests do, or one given crash-test faults). Outboxes of one key share its
 * in-process nonce manager, and outboxes over one store its `tx_senders` row, so they never reuse a nonce.
 */
import { systemClock } from "../../protocol/clock.ts";
import type { FacilitatorContext } from "../facilitatorContext.ts";
import { createOutbox, type OutboxFaults } from "./createOutbox.ts";
import type { Outbox } from "./outboxTypes.ts";

export function outboxFor(
  ctx: Pick<FacilitatorContext, "store" | "publicClient" | "gas" | "logger"> &
    Partial<Pick<FacilitatorContext, "outbox" | "clock">>,
  options: { faults?: OutboxFaults | undefined; confirmations?: number | undefined } = {},
): Outbox {
  if (ctx.outbox !== undefined && ctx.outbox.store === ctx.store && options.faults === undefined)
    return ctx.outbox;
  return createOutbox({
    store: ctx.store,
    client: ctx.publicClient,
    key: ctx.gas,
    clock: ctx.clock ?? systemClock,
    logger: ctx.logger,
    confirmations: options.confirmations,
    faults: options.faults,
  });
}
