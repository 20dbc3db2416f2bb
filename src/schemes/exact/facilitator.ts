/**
 * The `exact` scheme's facilitator part: `POST /authorize` settles a signed payment through the
 * settlement engine (batched, one outbox transaction per batch) and answers with a proof;
 * `POST /verify` checks a proof this facilitator signed; `GET /payments/:nonce` reads a payment back
 * for its payer or payee. `check` and `settle` are the same code as `/verify` and `/authorize`.
 * Loaded by the facilitator only (src/facilitator/facilitatorSchemes.ts), never by a gate.
 */
import { verify } from "node:crypto";
import {
  defineFacilitatorScheme,
  type FacilitatorSchemeContext,
} from "../../facilitator/facilitatorSchemeParts.ts";
import { mountPaymentReadBack } from "../../facilitator/paymentReadBack.ts";
import { readJsonBody } from "../../http/httpErrors.ts";
import { routeDoc } from "../../http/routeDocs.ts";
import { sameAddress } from "../../protocol/address.ts";
import { base64UrlDecode } from "../../protocol/base64.ts";
import { unixSeconds } from "../../protocol/clock.ts";
import {
  AuthorizeResponseSchema,
  VerifyRequestSchema,
  type VerifyResponse,
  VerifyResponseSchema,
} from "../../protocol/facilitator.ts";
import { memoNonce } from "../../protocol/memo.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { type PaymentProof, proofSigningInput } from "../../protocol/paymentProof.ts";
import { AuthorizeRequestSchema, type SignedPayment } from "../../protocol/signedPayment.ts";

/** What `/authorize` answers: the proof and where the payment settled. */
export type ExactSettled = {
  proof: PaymentProof;
  settled: { transaction: string; blockNumber: string; batchSize: number };
};

/** The routes of `exact`, documented for the OpenAPI document (routeDocs.ts). */
const docs = {
  authorize: routeDoc({
    summary:
      "Settle a signed EIP-3009 payment and return its Ed25519 payment proof (idempotent on the nonce)",
    request: AuthorizeRequestSchema,
    response: AuthorizeResponseSchema,
    errors: [400, 402, 409, 413, 422, 429, 503],
  }),
  verify: routeDoc({
    summary: "Check a payment proof",
    request: VerifyRequestSchema,
    response: VerifyResponseSchema,
    errors: [400, 413],
  }),
};

export const exactFacilitator = defineFacilitatorScheme({
  id: "exact",
  core: true,
  create(ctx: FacilitatorSchemeContext) {
    const { engine, store, clock } = ctx;

    async function authorize(signedPayment: SignedPayment): Promise<ExactSettled> {
      const { proof, row, batchSize } = await engine.authorize(signedPayment);
      return {
        proof,
        settled: {
          transaction: row.tx_hash ?? proof.tx,
          blockNumber: (row.block_number ?? 0n).toString(),
          batchSize,
        },
      };
    }

    /**
     * A proof is valid when one of our keys signed it, it has not expired, and the payment it names
     * is settled in our store with the same transaction, amount and payee.
     */
    async function verifyOwnProof(proof: PaymentProof): Promise<VerifyResponse> {
      const key = ctx.proofKeys().find((k) => k.kid === proof.kid);
      if (key === undefined) return { valid: false, reason: "unknown_kid" };
      const { sig, ...unsigned } = proof;
      const ok = verify(
        null,
        Buffer.from(proofSigningInput(unsigned), "utf8"),
        key.privateKey,
        base64UrlDecode(sig),
      );
      if (!ok) return { valid: false, reason: "bad_signature" };
      if (proof.exp <= unixSeconds(clock)) return { valid: false, reason: "expired" };
      const row = await engine.getPayment(memoNonce(proof.memo));
      if (row === undefined || row.status !== "settled") return { valid: false, reason: "not_settled" };
      if (
        row.tx_hash !== proof.tx.toLowerCase() ||
        row.amount !== BigInt(proof.amount) ||
        !sameAddress(row.pay_to, proof.payTo)
      ) {
        return { valid: false, reason: "mismatch" };
      }
      return { valid: true };
    }

    return {
      rateLimited: ["/authorize"],
      async check({ body }) {
        const parsed = VerifyRequestSchema.safeParse(body);
        if (!parsed.success) return { valid: false, reason: "malformed" };
        const result = await verifyOwnProof(parsed.data.proof);
        return result.valid ? { valid: true } : { valid: false, reason: result.reason ?? "invalid" };
      },
      settle: async ({ body }) =>
        authorize(parseWire(AuthorizeRequestSchema, body, { what: "request body" }).signedPayment),
      routes(app) {
        app.post("/authorize", docs.authorize, async (c) => {
          const { signedPayment } = await readJsonBody(c, AuthorizeRequestSchema);
          return c.json(await authorize(signedPayment));
        });
        app.post("/verify", docs.verify, async (c) => {
          const { proof } = await readJsonBody(c, VerifyRequestSchema);
          return c.json(await verifyOwnProof(proof));
        });
        mountPaymentReadBack(app, { engine, store, clock, contractSigners: ctx.contractSigners });
      },
    };
  },
});
