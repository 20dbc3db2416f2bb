/**
 * `GET /payments/:nonce`: a payment's status, transaction and proof, for its payer and its payee only
 * (docs/protocol.md, "Payment proof"). A proof is a bearer credential until a gate consumes it, and its memo names the
 * method and path the payer bought; handing either to anyone who knows the nonce (public on chain once
 * settled) let an observer race the payer to the gate with the payer's own proof.
 *
 * Who may read:
 * - the payee, with a provider API key (`Authorization: Bearer tg_…`) of the payment's `payTo`;
 * - the payer, with `X-Tollgate-Payer-Auth` (src/protocol/payerReadAuth.ts): an EIP-191 signature by
 *   the payment's `from` over the method, this path and a time at most 60 s old. An EOA's signature is
 *   recovered locally. A smart-contract wallet's (its owner's key, which does not recover to the wallet)
 *   is asked of the payment's payer through the chain (ERC-1271, contractSigners.ts) — only once the
 *   payment is found, only for a payer with code, in an `eth_call` capped in gas, and at most
 *   WALLET_READS per wallet at once (refilled one a second; 429 past it). So a stranger cannot make the
 *   facilitator run chain reads for addresses of its choosing: each one names a payment's payer. A key
 *   the wallet has accepted before (its owner) draws on a bucket of its own, so strangers spending the
 *   wallet's bucket with junk reads do not lock its owner out; every read is still put to the wallet.
 *
 * A request without either credential is refused (401) before the store is read. A credential that
 * checks out but belongs to neither party gets the same 404 as an unknown nonce, so the endpoint tells
 * a stranger nothing about which nonces the facilitator holds.
 */
import type { Context, Hono } from "hono";
import { type Address, getAddress, type Hex, hashMessage, recoverMessageAddress } from "viem";
import { z } from "zod";
import { routeDoc } from "../http/routeDocs.ts";
import { createTokenBuckets } from "../http/tokenBucket.ts";
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
import type { ContractSigners } from "./contractSigners.ts";
import type { PaymentRow } from "./paymentRecords.ts";
import { findProviderByApiKey } from "./providers/requireProvider.ts";
import type { SettlementEngine } from "./settlementEngine.ts";

export type PaymentReadBackDeps = {
  engine: Pick<SettlementEngine, "getPayment">;
  store: Store;
  clock: Clock;
  /** Checks a wallet payer's read (ERC-1271); without it only EOA payers read their payments. */
  contractSigners?: Pick<ContractSigners, "isValidSignature"> | undefined;
};

/**
 * Who is asking: the payee its key proves, or a payer's signed read — the address it recovers to (none
 * for a signature that recovers no key), and what was signed, for a wallet's check.
 */
type Reader =
  | { role: "payee"; address: string }
  | { role: "payer"; recovered: Address | undefined; message: string; signature: Hex };

/** Reads a wallet may have checked through the chain at once; one more each second. */
export const WALLET_READS = 10;

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
  const walletReads = createTokenBuckets({ capacity: WALLET_READS, refillPerSecond: 1, clock: deps.clock });
  /** `wallet:key` pairs whose read the wallet accepted; insertion-ordered, the oldest forgotten first. */
  const knownKeys = new Set<string>();

  /** Whether the payer of `row` (a wallet) accepts the signed read: gas-capped chain read, rate-limited. */
  const walletSigned = async (row: PaymentRow, reader: Reader & { role: "payer" }): Promise<boolean> => {
    if (deps.contractSigners === undefined) return false;
    const pair =
      reader.recovered === undefined
        ? undefined
        : `${row.payer.toLowerCase()}:${reader.recovered.toLowerCase()}`;
    const taken = walletReads.take(
      pair !== undefined && knownKeys.has(pair) ? pair : row.payer.toLowerCase(),
    );
    if (!taken.ok) {
      throw new TollgateError(
        "RateLimited",
        `too many signed reads for this payer; retry after ${taken.retryAfterSeconds} s`,
        { retryAfter: taken.retryAfterSeconds, details: { limit: "walletRead" } },
      );
    }
    const accepted = await deps.contractSigners.isValidSignature(
      getAddress(row.payer),
      hashMessage(reader.message),
      reader.signature,
    );
    if (accepted && pair !== undefined) {
      knownKeys.delete(pair);
      if (knownKeys.size >= 10_000) {
        const oldest = knownKeys.values().next();
        if (oldest.done !== true) knownKeys.delete(oldest.value);
      }
      knownKeys.add(pair);
    }
    return accepted;
  };

  app.get("/payments/:nonce", readBackDoc, async (c) => {
    const nonce = NonceSchema.safeParse(c.req.param("nonce"));
    if (!nonce.success) throw new TollgateError("InvalidRequest", "nonce must be 0x and 64 hex digits");
    const reader = await readerOf(c, deps, `/payments/${nonce.data}`);
    const row = await deps.engine.getPayment(nonce.data.toLowerCase());
    const allowed =
      row !== undefined &&
      (reader.role === "payee"
        ? sameAddress(row.pay_to, reader.address)
        : (reader.recovered !== undefined && sameAddress(row.payer, reader.recovered)) ||
          (await walletSigned(row, reader)));
    if (!allowed) {
      if (reader.role === "payer" && reader.recovered === undefined) {
        throw new TollgateError("Unauthorized", `${PAYER_AUTH_HEADER} carries no recoverable signature`, {
          details: { reason: "bad_payer_signature" },
        });
      }
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
  const recovered = await recoverMessageAddress({ message, signature }).catch(() => undefined);
  return { role: "payer", recovered, message, signature };
}

function recordOf(row: PaymentRow): PaymentRecord {
  return {
    nonce: row.nonce,
    status: row.status,
    network: row.network as PaymentRecord["network"],
    // docs/protocol.md: addresses are checksummed on output (the store keeps them lowercase).
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
