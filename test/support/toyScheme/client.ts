/**
 * The toy scheme's client part: pays a `toy` option by minting a ticket for the request, and sends
 * a ticket up front to a route it has paid before (one HTTP exchange per call after the first).
 */
import { randomBytes } from "node:crypto";
import type { ClientSchemePart } from "../../../src/schemes/types.ts";
import { signToyTicket, TOY_TICKET_HEADER } from "./ticket.ts";

export function toyClient(secret: Uint8Array): ClientSchemePart {
  /** Price of each route paid before, by method and URL. */
  const known = new Map<string, bigint>();
  const ticketFor = (request: Request, payer: `0x${string}`, amount: bigint) => ({
    [TOY_TICKET_HEADER]: signToyTicket(secret, {
      p: payer,
      a: amount.toString(),
      m: request.method,
      u: new URL(request.url).pathname,
      n: randomBytes(16).toString("hex"),
    }),
  });
  return {
    payable: (option, payer) => option.scheme === "toy" && option.network === payer.network,
    callPrice: (option) => BigInt(option.amount),
    async pay(option, context) {
      const amount = BigInt(option.amount);
      if (amount > context.maxAmount) throw new Error("toy price above the ceiling");
      known.set(`${context.request.method} ${context.request.url}`, amount);
      return { headers: ticketFor(context.request, context.payer.address, amount), amount };
    },
    async upFront(request, payer) {
      const amount = known.get(`${request.method} ${request.url}`);
      return amount === undefined ? undefined : ticketFor(request, payer.address, amount);
    },
  };
}
