/**
 * The toy scheme's facilitator part: the toy bank, where a seller redeems the tickets it served
 * (`POST /toy/redeem`, `{ ticket }`). `check` tells whether a ticket is the bank's; `settle` redeems
 * it, once per nonce (a second redemption is refused `NonceAlreadyUsed`). Redemptions are held in
 * memory: a toy, not money. Registered in one line: `createFacilitator({ schemes: [toyFacilitator(secret)] })`.
 */
import { z } from "zod";
import {
  defineFacilitatorScheme,
  type FacilitatorSchemeContext,
} from "../../../src/facilitator/facilitatorSchemeParts.ts";
import { readJsonBody } from "../../../src/http/httpErrors.ts";
import { routeDoc } from "../../../src/http/routeDocs.ts";
import { TollgateError } from "../../../src/protocol/errors.ts";
import { parseWire } from "../../../src/protocol/parseWire.ts";
import { openToyTicket } from "./ticket.ts";

const RedeemRequestSchema = z.strictObject({ ticket: z.string().min(1).max(2048) });

export type ToyRedemption = { nonce: string; payer: string; amount: string };

const redeemDoc = routeDoc({
  summary: "Redeem a toy ticket a seller served, once per nonce",
  request: RedeemRequestSchema,
  errors: [400, 402, 409],
});

export function toyFacilitator(secret: Uint8Array) {
  return defineFacilitatorScheme({
    id: "toy",
    create(ctx: FacilitatorSchemeContext) {
      const redeemed = new Set<string>();
      function redeem(ticket: string): ToyRedemption {
        const opened = openToyTicket(secret, ticket);
        if (!opened.ok) throw new TollgateError("InvalidPaymentProof", opened.reason);
        if (redeemed.has(opened.ticket.n)) {
          throw new TollgateError("NonceAlreadyUsed", "this ticket was already redeemed");
        }
        redeemed.add(opened.ticket.n);
        ctx.logger.debug({ nonce: opened.ticket.n }, "toy ticket redeemed");
        return { nonce: opened.ticket.n, payer: opened.ticket.p, amount: opened.ticket.a };
      }
      return {
        rateLimited: ["/toy/redeem"],
        async check({ body }) {
          const request = RedeemRequestSchema.safeParse(body);
          if (!request.success) return { valid: false, reason: "malformed" };
          const opened = openToyTicket(secret, request.data.ticket);
          return opened.ok ? { valid: true } : { valid: false, reason: opened.reason };
        },
        async settle({ body }) {
          return redeem(parseWire(RedeemRequestSchema, body, { what: "request body" }).ticket);
        },
        routes(app) {
          app.post("/toy/redeem", redeemDoc, async (c) =>
            c.json(redeem((await readJsonBody(c, RedeemRequestSchema)).ticket)),
          );
        },
      };
    },
  });
}
