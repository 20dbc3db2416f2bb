/**
 * Paying standard x402 v2 servers (docs/x402.md; docs/client.md): from the `PAYMENT-REQUIRED` of a 402, pick an
 * `exact` EVM option, sign its EIP-3009 `TransferWithAuthorization` and build the `PAYMENT-SIGNATURE`
 * header. The payload is the one `@x402/evm`'s exact client scheme (2.27) builds through
 * `x402Client.createPaymentPayload`: `{ x402Version: 2, payload: { authorization, signature },
 * extensions?, resource, accepted }`, with `accepted` the chosen option exactly as the server sent it
 * (x402 servers match it by deep equality), `validAfter = "0"`, `validBefore = now + maxTimeoutSeconds`
 * and a random 32-byte nonce. The server settles it; nothing goes to the payer's own facilitator.
 *
 * Invariants:
 * - Nothing is signed for an option the payer would not pay: another scheme or network, a Permit2
 *   transfer, a token the payer does not hold as USDC (x402 v2 clients likewise refuse assets they do
 *   not know), or a price above the ceiling. A server cannot make the payer sign for 1 unit of a
 *   token worth more than the ceiling meant.
 * - An authorization is spendable for at most `MAX_AUTHORIZATION_SECONDS` (x402 itself signs for the
 *   whole `maxTimeoutSeconds`), so a payment a server never settled cannot come back much later.
 */
import { randomBytes } from "node:crypto";
import { type Address, getAddress, type Hex, toHex } from "viem";
import {
  signTransferAuthorization,
  type TransferAuthorization,
} from "../../chain/signers/signTransferAuthorization.ts";
import type { FetchWithPaymentOptions } from "../../client/fetchOptions.ts";
import { parseUsdcCeiling } from "../../client/parseUsdcCeiling.ts";
import type { PayerSigner, PayX402 } from "../../client/payerTypes.ts";
import { readPaymentRequired } from "../../client/readPaymentRequired.ts";
import { requireObject } from "../../http/checkInput.ts";
import type { FacilitatorClient } from "../../http/facilitatorClient.ts";
import { AddressSchema, sameAddress } from "../../protocol/address.ts";
import { AtomicAmountSchema } from "../../protocol/amount.ts";
import { type Clock, systemClock, unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { encodeJsonHeader, HeaderName } from "../../protocol/header.ts";
import { chainIdOf, type Network } from "../../protocol/network.ts";
import {
  X402_VERSION,
  type X402PaymentPayload,
  type X402PaymentRequired,
  type X402PaymentRequirements,
} from "../../protocol/x402.ts";
import type { ClientSchemePart, SchemePayer } from "../types.ts";

/**
 * Who pays: the signing account and its network. `facilitator` is only read for the tokens it
 * settles (`GET /supported`), the assets paid when `allowedAssets` is not given. A `Payer` from
 * `createPayer` satisfies it.
 */
export type X402Payer = {
  readonly network: Network;
  readonly account: PayerSigner;
  readonly facilitator?: Pick<FacilitatorClient, "supported">;
};

export type CreateX402PaymentOptions = {
  /** The most this payment may cost: a bigint of smallest units or USDC text (`"0.50"`). */
  maxPrice: bigint | string;
  /**
   * Token addresses the payer pays in on its network (USDC). Default: the tokens the payer's
   * facilitator lists for the network in `GET /supported`.
   */
  allowedAssets?: readonly string[];
  clock?: Clock;
  /** Random bytes for the EIP-3009 nonce (default `crypto.randomBytes`). */
  random?: (bytes: number) => Uint8Array;
};

/** A signed x402 payment, ready to send. */
export type X402Payment = {
  /** The option paid, as the server sent it (also the payload's `accepted`). */
  requirements: X402PaymentRequirements;
  amount: bigint;
  /** The token paid, and the authorization's nonce and expiry: what reads the payment back on chain. */
  asset: Address;
  nonce: Hex;
  /** Unix seconds: no transfer can use the authorization at or after this time. */
  validBefore: number;
  payload: X402PaymentPayload;
  /** `PAYMENT-SIGNATURE: base64(JSON(payload))`. */
  header: { name: string; value: string };
};

/** Longest validity of an authorization signed for an x402 server (x402 default timeouts are 60–300 s). */
export const MAX_AUTHORIZATION_SECONDS = 3600;

/** A candidate option, read strictly: the terms the payer signs. */
type Candidate = {
  requirements: X402PaymentRequirements;
  amount: bigint;
  asset: Address;
  payTo: Address;
  domain: { name: string; version: string };
  maxTimeoutSeconds: number;
};

/**
 * Signs a payment for the cheapest option of `paymentRequired` this payer can pay within `maxPrice`.
 *
 * Throws `TollgateError`, having signed nothing: `UnsupportedNetwork` when no option is an `exact`
 * EIP-3009 option on the payer's network, `UnsupportedToken` when none is in an allowed asset,
 * `PriceCeilingExceeded` when every remaining option costs more than `maxPrice`.
 *
 * @example
 * const payment = await createX402Payment(payer, paymentRequired, { maxPrice: "0.10" });
 * await fetch(url, { headers: { [payment.header.name]: payment.header.value } });
 */
export async function createX402Payment(
  payer: X402Payer,
  paymentRequired: X402PaymentRequired,
  options: CreateX402PaymentOptions,
): Promise<X402Payment> {
  const usage = "createX402Payment(payer, paymentRequired, { maxPrice })";
  requireObject(payer, usage);
  requireObject(paymentRequired, usage);
  requireObject(options, usage);
  if (!Array.isArray(paymentRequired.accepts)) {
    throw new TollgateError(
      "InvalidRequest",
      `${usage}: paymentRequired is x402's PAYMENT-REQUIRED, with accepts`,
    );
  }
  const maxPrice = parseUsdcCeiling(options.maxPrice);
  const clock = options.clock ?? systemClock;
  const random = options.random ?? ((bytes: number) => randomBytes(bytes));

  const onNetwork = candidatesOnNetwork(paymentRequired, payer.network);
  const allowed = options.allowedAssets ?? (await facilitatorAssets(payer));
  const chosen = cheapestAllowed(onNetwork, allowed, payer.network, maxPrice);

  const nonceBytes = random(32);
  if (nonceBytes.length !== 32) throw new TollgateError("Internal", "random() must return 32 bytes");
  const now = unixSeconds(clock);
  const authorization: TransferAuthorization = {
    from: payer.account.address,
    to: chosen.payTo,
    value: chosen.amount,
    // EIP-3009: valid strictly after validAfter and strictly before validBefore.
    validAfter: 0n,
    validBefore: BigInt(now + Math.min(chosen.maxTimeoutSeconds, MAX_AUTHORIZATION_SECONDS)),
    nonce: toHex(nonceBytes) as Hex,
  };
  const signature = await signTransferAuthorization(payer.account, {
    domain: { ...chosen.domain, chainId: chainIdOf(payer.network), verifyingContract: chosen.asset },
    authorization,
  });
  const payload = paymentPayload(paymentRequired, chosen, authorization, signature);
  return {
    requirements: chosen.requirements,
    amount: chosen.amount,
    asset: chosen.asset,
    nonce: authorization.nonce,
    validBefore: Number(authorization.validBefore),
    payload,
    header: { name: HeaderName.X402PaymentSignature, value: encodeJsonHeader(payload) },
  };
}

/** The options of the 402 that are `exact` EIP-3009 payments on `network`; throws when there is none. */
function candidatesOnNetwork(paymentRequired: X402PaymentRequired, network: Network): Candidate[] {
  const onNetwork = paymentRequired.accepts.flatMap((requirements) => {
    const candidate = readCandidate(requirements, network);
    return candidate === undefined ? [] : [candidate];
  });
  if (onNetwork.length === 0) {
    throw new TollgateError(
      "UnsupportedNetwork",
      `no option of this x402 402 is an exact EIP-3009 payment on ${network}`,
      {
        details: { offered: paymentRequired.accepts.map((a) => ({ scheme: a.scheme, network: a.network })) },
      },
    );
  }
  return onNetwork;
}

/** The cheapest candidate in an allowed asset; throws when none is allowed or it costs over `maxPrice`. */
function cheapestAllowed(
  onNetwork: readonly Candidate[],
  allowed: readonly string[],
  network: Network,
  maxPrice: bigint,
): Candidate {
  const inAsset = onNetwork.filter((c) => allowed.some((asset) => sameAddress(asset, c.asset)));
  if (inAsset.length === 0) {
    throw new TollgateError(
      "UnsupportedToken",
      "this x402 server asks for a token the payer does not pay in",
      {
        details: { assets: [...new Set(onNetwork.map((c) => c.asset))], network },
      },
    );
  }
  // Cheapest first; the sort is stable, so the server's order breaks ties.
  const byPrice = [...inAsset].sort((a, b) => (a.amount < b.amount ? -1 : a.amount > b.amount ? 1 : 0));
  const chosen = byPrice[0]!;
  if (chosen.amount > maxPrice) {
    throw new TollgateError("PriceCeilingExceeded", "every x402 option costs more than the price ceiling", {
      details: { cheapest: chosen.amount.toString(), maxPrice: maxPrice.toString() },
    });
  }
  return chosen;
}

/** The payload `@x402/evm`'s exact client builds: the authorization in decimal text, `accepted` as sent. */
function paymentPayload(
  paymentRequired: X402PaymentRequired,
  chosen: Candidate,
  authorization: TransferAuthorization,
  signature: Hex,
): X402PaymentPayload {
  return {
    x402Version: X402_VERSION,
    payload: {
      authorization: {
        from: authorization.from,
        to: authorization.to,
        value: authorization.value.toString(),
        validAfter: authorization.validAfter.toString(),
        validBefore: authorization.validBefore.toString(),
        nonce: authorization.nonce,
      },
      signature,
    },
    // x402 clients without extension handlers pass the server's declared extensions back unchanged.
    ...(paymentRequired.extensions == null ? {} : { extensions: paymentRequired.extensions }),
    resource: paymentRequired.resource,
    accepted: chosen.requirements,
  };
}

/**
 * The `payX402` seam of `fetchWithPayment` for one payer: each x402-only 402 is paid with
 * `createX402Payment` within the call's `maxPrice`. The facilitator's token list, when used, is read
 * once and cached after it succeeds.
 *
 * @example
 * const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "0.10", choose, payX402: createPayX402(payer) });
 */
export function createPayX402(
  payer: X402Payer,
  options: Omit<CreateX402PaymentOptions, "maxPrice"> = {},
): PayX402 {
  requireObject(payer, "createPayX402(payer, options?)");
  requireObject(options, "createPayX402(payer, options?)");
  let assets: Promise<readonly string[]> | undefined;
  const allowedAssets = () => {
    assets ??= facilitatorAssets(payer).catch((error: unknown) => {
      assets = undefined;
      throw error;
    });
    return assets;
  };
  return async (paymentRequired, { maxPrice }) => {
    const payment = await createX402Payment(payer, paymentRequired, {
      ...options,
      maxPrice,
      allowedAssets: options.allowedAssets ?? (await allowedAssets()),
    });
    return payment.header;
  };
}

/**
 * The client part of `x402Exact`: it pays no Tollgate `accepts` entry (a Tollgate gate's x402 entries
 * are `exact` options, paid once with a proof), only 402s that carry nothing but x402's
 * `PAYMENT-REQUIRED`. There `fetchWithPayment` asks its flows, which pay through the caller's
 * `payX402` or, without a custom `choose`, `createPayX402(payer)`: a caller that chooses (a budget
 * policy) must also pass `payX402`, so that no x402 spend bypasses it.
 */
export const x402ExactClient: ClientSchemePart = {
  payable: () => false,
  callPrice: (option) => BigInt(option.amount),
  flows(context) {
    const options = context.options as FetchWithPaymentOptions;
    const payer = context.payer as SchemePayer & { account?: PayerSigner };
    const payX402 =
      options.payX402 ??
      (options.choose === undefined && payer.account !== undefined
        ? createPayX402({ network: payer.network, account: payer.account, facilitator: payer.facilitator })
        : undefined);
    return {
      async payUnread(response, call) {
        const offer = await readPaymentRequired(response.clone());
        if (offer?.kind !== "x402") return undefined;
        if (payX402 === undefined) {
          throw new TollgateError(
            "InvalidRequest",
            "this server takes only x402 PAYMENT-SIGNATURE payments: pass payX402 (with a custom choose, or a payer without an account)",
            { details: { url: call.request.url } },
          );
        }
        const header = await payX402(offer.paymentRequired, {
          request: call.request,
          maxPrice: context.maxPrice,
        });
        return header === undefined ? response : call.send({ [header.name]: header.value });
      },
    };
  },
};

/** An `exact` EIP-3009 option on `network` with well-formed terms, or `undefined`. */
function readCandidate(requirements: X402PaymentRequirements, network: Network): Candidate | undefined {
  if (requirements.scheme !== "exact" || requirements.network !== network) return undefined;
  const extra = requirements.extra ?? {};
  const method = extra.assetTransferMethod;
  if (method !== undefined && method !== "eip3009") return undefined;
  const { name, version } = extra;
  if (typeof name !== "string" || name === "" || typeof version !== "string" || version === "") {
    return undefined;
  }
  const amount = AtomicAmountSchema.safeParse(requirements.amount);
  const asset = AddressSchema.safeParse(requirements.asset);
  const payTo = AddressSchema.safeParse(requirements.payTo);
  if (!amount.success || !asset.success || !payTo.success || amount.data === "0") return undefined;
  if (!Number.isSafeInteger(requirements.maxTimeoutSeconds) || requirements.maxTimeoutSeconds <= 0) {
    return undefined;
  }
  return {
    requirements,
    amount: BigInt(amount.data),
    asset: getAddress(asset.data),
    payTo: getAddress(payTo.data),
    domain: { name, version },
    maxTimeoutSeconds: requirements.maxTimeoutSeconds,
  };
}

async function facilitatorAssets(payer: X402Payer): Promise<readonly string[]> {
  if (payer.facilitator === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      "createX402Payment: give allowedAssets or a payer with a facilitator to list its tokens",
    );
  }
  const supported = await payer.facilitator.supported();
  return supported.networks.find((n) => n.network === payer.network)?.tokens.map((t) => t.address) ?? [];
}
