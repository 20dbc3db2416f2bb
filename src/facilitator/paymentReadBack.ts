/**
 * `GET /payments/:nonce`: a payment's status, transaction and proof, for its payer and its payee only
 * (DESIGN.md §2.4). A proof is a bearer credential until a gate consumes it, and its memo names the
 * method and path the payer bought; handing either to anyone who knows the nonce (public on chain once
 * settled) let an observer race the payer to the gate with the payer's own proof.
 *
 * Who may read:
 * - the payee, with a provider API key (`Authorization: Bearer tg_…`) of the payment's `payTo`;
 * - the payer, with `X-Tollgate-Payer-Auth` (src/protocol/payerReadAuth.ts): an EIP-191 signature by
 *   the payment's `from` over the method, this path and a time at most 60 s old.
 *
 * A request without either credential is refused (401) before the store is read. A credential that
 * checks out but belongs to neither party gets the same 404 as an unknown nonce, so the endpoint tells
 * a stranger nothing about which nonces the facilitator holds.
 */
import type { Context, Hono } from "hono";
import { getAddress, recoverMessageAddress } from "viem";
import { z } from "zod";
import { sameAddress } from "../protocol/address.ts";
import { type Clock, unixSeconds } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { type PaymentRecord, PaymentRecordSchema } from "../protocol/facilitator.ts";
import {
  isFreshPayerAuth,
  PAYER_AUTH_HEADER,
  PAYER_READ_MAX_AGE_SECONDS,
  parsePayerAuth,
  payerReadMessage,
} from "../protocol/payerReadAuth.ts";
import type { Store } from "../store/store.ts";
import type { PaymentRow } from "./paymentRecords.ts";
import { findProviderByApiKey } from "./providers/requireProvider.ts";
import { routeDoc } from "./routeDocs.ts";
import type { SettlementEngine } from "./settlementEngine.ts";

export type PaymentReadBackDeps = {
  engine: Pick<SettlementEngine, "getPayment">;
  store: Store;
  clock: Clock;
};

/** Who is asking: the address the credential proves, and in which role it may read. */
type Reader = { role: "payee" | "payer"; address: string };

const NonceSchema = z.string().regex(/^0x[0-9a-fA-F]{64}$/);

const readBackDoc = routeDoc({
  summary:
    "A payment's status, transaction and proof, by its EIP-3009 nonce (= keccak256(memo)), for its payer or payee only",
  params: { nonce: NonceSchema },
  response: PaymentRecordSchema,
  errors: [400, 401, 404],
  // Checked in the handler (`readerOf`): the payee's provider key, or the payer's signed read.
  auth: ["providerKey", "payerAuth"],
});

export function mountPaymentReadBack(app: Hono, deps: PaymentReadBackDeps): void {
  app.get("/payments/:nonce", readBackDoc, async (c) => {
    const nonce = NonceSchema.safeParse(c.req.param("nonce"));
    if (!nonce.success) throw new TollgateError("InvalidRequest", "nonce must be 0x and 64 hex digits");
    const reader = await readerOf(c, deps, `/payments/${nonce.data}`);
    const row = await deps.engine.getPayment(nonce.data.toLowerCase());
    const owner = row === undefined ? undefined : reader.role === "payee" ? row.pay_to : row.payer;
    if (row === undefined || owner === undefined || !sameAddress(owner, reader.address)) {
      throw new TollgateError("NotFound", "no payment with that nonce for this payer or payee");
    }
    return c.json(recordOf(row));
  });
}

/** The caller's credential, checked; a request with none, or a bad one, is a 401. */
async function readerOf(c: Context, deps: PaymentReadBackDeps, relativePath: string): Promise<Reader> {
  const authorization = c.req.header("authorization");
  if (authorization !== undefined) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    const provider = match === null ? undefined : await findProviderByApiKey(deps.store, match[1] ?? "");
    if (provider === undefined) throw new TollgateError("Unauthorized", "unknown or revoked API key");
    return { role: "payee", address: provider.address };
  }
  const header = c.req.header(PAYER_AUTH_HEADER);
  if (header === undefined) {
    throw new TollgateError(
      "Unauthorized",
      `a payment is readable by its payee (Authorization: Bearer <provider API key>) or its payer (${PAYER_AUTH_HEADER})`,
    );
  }
  const { t, signature } = parsePayerAuth(header);
  const now = unixSeconds(deps.clock);
  if (!isFreshPayerAuth(t, now)) {
    throw new TollgateError(
      "Unauthorized",
      `${PAYER_AUTH_HEADER} is older than ${PAYER_READ_MAX_AGE_SECONDS} s or in the future: sign the read again`,
      { details: { reason: "stale_payer_auth", t, now } },
    );
  }
  // The path relative to the facilitator's base, rebuilt from the route: the same text whether this
  // app is served at the root, mounted under a prefix, or behind a proxy that strips one.
  const message = payerReadMessage({ method: c.req.method, path: relativePath, t });
  const address = await recoverMessageAddress({ message, signature }).catch(() => undefined);
  if (address === undefined) {
    throw new TollgateError("Unauthorized", `${PAYER_AUTH_HEADER} carries no recoverable signature`, {
      details: { reason: "bad_payer_signature" },
    });
  }
  return { role: "payer", address };
}

function recordOf(row: PaymentRow): PaymentRecord {
  return {
    nonce: row.nonce,
    status: row.status,
    network: row.network as PaymentRecord["network"],
    // DESIGN.md §2: addresses are checksummed on output (the store keeps them lowercase).
    token: getAddress(row.token),
    payer: getAddress(row.payer),
    payTo: getAddress(row.pay_to),
    amount: row.amount.toString(),
    transaction: row.tx_hash,
    ...(row.proof === null ? {} : { proof: row.proof }),
    ...(row.failure_code === null
      ? {}
      : { failure: { code: row.failure_code, message: row.failure_message } }),
  };
}
