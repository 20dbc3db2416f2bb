/**
 * The toy scheme's gate part: `{ type: "toy", amount }` entries; a request carrying `X-Toy-Ticket`
 * is checked locally (HMAC, method, path, amount) and its nonce consumed once in the gate's replay
 * guard; the sale is booked in `sales` before the response leaves (`complete`), and a failed
 * handler hands the ticket back.
 */
import { z } from "zod";
import { TollgateError } from "../../../src/protocol/errors.ts";
import type { GateSchemePart, SchemeAcceptance, SchemePaymentBase } from "../../../src/schemes/types.ts";
import { openToyTicket, TOY_TICKET_HEADER } from "./ticket.ts";

export type ToyOffer = { scheme: "toy"; amount: bigint };
export type ToyPayment = SchemePaymentBase & { scheme: "toy"; nonce: string };

declare module "../../../src/schemes/types.ts" {
  interface SchemePayments {
    toy: ToyPayment;
  }
}

const ToyPricingSchema = z.strictObject({ type: z.literal("toy"), amount: z.bigint().positive() });

/** A sale booked by `complete`, with the handler's status. */
export type ToySale = { nonce: string; amount: bigint; status: number };

export function toyGate(secret: Uint8Array, sales: ToySale[]): GateSchemePart<ToyOffer> {
  return {
    pricingTypes: ["toy"],
    create(context) {
      return {
        compile(entry, where) {
          const parsed = ToyPricingSchema.safeParse(entry);
          if (!parsed.success) {
            throw new TollgateError(
              "InvalidRequest",
              `paymentGate options: ${where}: a toy entry is { type: "toy", amount: bigint }`,
            );
          }
          return { scheme: "toy", amount: parsed.data.amount };
        },
        offer: (offer) => ({ scheme: "toy", amount: offer.amount, extra: { bank: "toy" } }),
        credential: (request) => request.headers.get(TOY_TICKET_HEADER),
        async accept(text, request, route): Promise<SchemeAcceptance> {
          const refuse = (reason: string): SchemeAcceptance => ({
            kind: "refuse",
            error: "InvalidPaymentProof",
            message: `toy ticket refused: ${reason}`,
          });
          const opened = openToyTicket(secret, text);
          if (!opened.ok) return refuse(opened.reason);
          const { ticket } = opened;
          if (ticket.m !== request.method || ticket.u !== request.path)
            return refuse("ticket for another request");
          const price = route.offers[0]?.amount ?? 0n;
          if (BigInt(ticket.a) < price) return refuse("ticket below the price");
          const key = `toy:${ticket.n}`;
          if (!(await context.replayGuard.consume(key, context.clock.now() + 600_000))) {
            return refuse("ticket already used");
          }
          const paid: ToyPayment = {
            scheme: "toy",
            payer: ticket.p as `0x${string}`,
            amount: BigInt(ticket.a),
            payTo: context.payTo,
            network: context.network,
            token: context.token,
            nonce: ticket.n,
          };
          const headers = new Headers({ "x-toy-receipt": ticket.n });
          return {
            kind: "pass",
            paid,
            headers,
            // Persist before respond: the adapters await this before the response leaves.
            complete: async (status) => {
              sales.push({ nonce: ticket.n, amount: paid.amount, status });
              if (status >= 500) await context.replayGuard.release(key);
            },
          };
        },
      };
    },
  };
}
