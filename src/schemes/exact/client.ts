/**
 * The client part of `exact`: an option is payable once when it is `exact`, on the payer's network
 * and settled through the payer's facilitator; paying it (`payExactOption`: sign the EIP-3009
 * authorization, `/authorize`, check the proof) is the payer's `pay`, sent as `X-PAYMENT`. Its
 * payments are the payer's one-time payments (`oneTime`), and a 5xx to one re-sends the same proof.
 */
import type { Address } from "viem";
import { signTransferAuthorization } from "../../chain/signers/signTransferAuthorization.ts";
import type { TypedDataSigner } from "../../chain/signers/typedDataSigner.ts";
import { facilitatorMismatch } from "../../client/payableOptions.ts";
import type { PaymentReceipt } from "../../client/payerTypes.ts";
import { type FacilitatorClient, sameFacilitatorUrl } from "../../http/facilitatorClient.ts";
import { sameAddress } from "../../protocol/address.ts";
import { type Clock, unixSeconds } from "../../protocol/clock.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { encodeJsonHeader, HeaderName } from "../../protocol/header.ts";
import { memoNonce, splitMemo } from "../../protocol/memo.ts";
import type { Network } from "../../protocol/network.ts";
import type { PaymentProof } from "../../protocol/paymentProof.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import { perCallPrice, pricingOfOption } from "../../protocol/pricing.ts";
import type { ClientSchemePart, SchemePayer } from "../types.ts";
import { resendProof } from "./client/resendProof.ts";

/** What paying once needs of a payer: `createPayer`'s `pay(option, { maxAmount })`. */
type OneTimePayer = SchemePayer & {
  pay?(
    option: PaymentOption,
    options: { maxAmount: bigint; signal?: AbortSignal | undefined },
  ): Promise<{
    header: string;
  }>;
};

export const exactClient: ClientSchemePart = {
  payable: (option, payer) =>
    option.scheme === "exact" &&
    option.network === payer.network &&
    (option.tollgate?.facilitator === undefined ||
      sameFacilitatorUrl(option.tollgate.facilitator, payer.facilitator.url)),
  callPrice: (option) => {
    const pricing = pricingOfOption(option);
    return pricing === undefined ? BigInt(option.amount) : perCallPrice(pricing);
  },
  async pay(option, context) {
    const payer = context.payer as OneTimePayer;
    if (typeof payer.pay !== "function") {
      throw new TollgateError("InvalidRequest", "paying an exact option needs a payer from createPayer");
    }
    const receipt = await payer.pay(option, { maxAmount: context.maxAmount, signal: context.signal });
    return { headers: { [HeaderName.Payment]: receipt.header }, amount: BigInt(option.amount), receipt };
  },
  oneTime: true,
  resend: resendProof,
};

/** What paying an `exact` option needs of a payer: its signer, chain, facilitator and token domains. */
export type ExactSigner = {
  account: TypedDataSigner;
  network: Network;
  chainId: number;
  facilitator: FacilitatorClient;
  clock: Clock;
  /** Longest validity of an authorization, seconds; the offer's expiry caps it too. */
  validForSeconds: number;
  /** The token's EIP-712 `{ name, version }` (the facilitator's `/supported`, or configured). */
  tokenDomainOf(token: Address): Promise<{ name: string; version: string }>;
};

/** An offer this close to its expiry is not worth signing: it would expire before it settles. */
const MIN_OFFER_REMAINING_SECONDS = 15;
/** `validAfter` lies this far in the past, so a chain clock slightly behind ours still accepts it. */
const VALID_AFTER_SKEW_SECONDS = 60;

/**
 * Pays one `exact` option for a payer (docs/protocol.md, "Signed payment"): checks it (scheme, network, facilitator, memo
 * claims, ceiling, expiry), signs the EIP-3009 authorization with `nonce = keccak256(memo)` and a
 * `validBefore` within the offer, has the facilitator settle it (`/authorize`), and checks the proof is
 * for exactly what was paid. `createPayer`'s `pay` is this.
 */
export async function payExactOption(
  signer: ExactSigner,
  option: PaymentOption,
  ceiling: bigint | undefined,
  signal: AbortSignal | undefined,
): Promise<PaymentReceipt> {
  const { account, network, chainId, facilitator, clock, validForSeconds, tokenDomainOf } = signer;
  {
    assertPayable(option, { network, facilitator: facilitator.url });
    const amount = BigInt(option.amount);
    if (ceiling !== undefined && amount > ceiling) {
      throw new TollgateError("PriceCeilingExceeded", "the price is above the payer's ceiling", {
        details: { amount: option.amount, maxAmount: ceiling.toString() },
      });
    }
    const now = unixSeconds(clock);
    const expiresAt = offerExpiry(option);
    if (expiresAt - now < MIN_OFFER_REMAINING_SECONDS) {
      throw new TollgateError("AuthorizationExpired", "the offer has expired; request the resource again", {
        details: { expiresAt, now },
      });
    }
    const domain = await tokenDomainOf(option.token);
    const authorization = {
      from: account.address,
      to: option.payTo,
      value: amount,
      validAfter: BigInt(Math.max(0, now - VALID_AFTER_SKEW_SECONDS)),
      validBefore: BigInt(Math.min(now + validForSeconds, expiresAt)),
      nonce: memoNonce(option.memo),
    };
    const signature = await signTransferAuthorization(account, {
      domain: { ...domain, chainId, verifyingContract: option.token },
      authorization,
    });
    const reply = await facilitator.authorize(
      {
        scheme: "exact",
        network,
        token: option.token,
        memo: option.memo,
        authorization: {
          from: authorization.from,
          to: authorization.to,
          value: option.amount,
          validAfter: authorization.validAfter.toString(),
          validBefore: authorization.validBefore.toString(),
          nonce: authorization.nonce,
        },
        signature,
      },
      { signal },
    );
    assertProofMatches(reply.proof, option, account.address);
    return { option, proof: reply.proof, header: encodeJsonHeader(reply.proof), settled: reply.settled };
  }
}

/** Refuses, before signing, an option this payer cannot or should not pay. */
function assertPayable(option: PaymentOption, payer: { network: Network; facilitator: string }): void {
  if (option.scheme !== "exact") {
    throw new TollgateError("InvalidRequest", `pay() pays "exact" options; this one is "${option.scheme}"`, {
      details: { scheme: option.scheme },
    });
  }
  // Another network cannot be paid; a proof from another facilitator would be refused by the gate
  // after the money had moved.
  const mismatch = facilitatorMismatch([option], {
    network: payer.network,
    facilitator: { url: payer.facilitator },
  });
  if (mismatch !== undefined) {
    const { details } = mismatch;
    throw new TollgateError(
      details.reason === "other_network" ? "UnsupportedNetwork" : "InvalidRequest",
      mismatch.message,
      { details: { ...details, network: option.network, facilitator: option.tollgate?.facilitator } },
    );
  }
  let claims: ReturnType<typeof splitMemo>["payload"];
  try {
    claims = splitMemo(option.memo).payload;
  } catch (cause) {
    throw new TollgateError("InvalidRequest", "the option's memo is malformed", { cause });
  }
  if (
    claims.a !== option.amount ||
    !sameAddress(claims.t, option.payTo) ||
    claims.n !== option.network ||
    !sameAddress(claims.k, option.token)
  ) {
    throw new TollgateError("InvalidRequest", "the option's memo prices other terms than the option states", {
      details: { memo: { amount: claims.a, payTo: claims.t, network: claims.n, token: claims.k } },
    });
  }
}

function offerExpiry(option: PaymentOption): number {
  return splitMemo(option.memo).payload.e;
}

/** The facilitator's proof must be for exactly what was paid; anything else is useless at the gate. */
function assertProofMatches(proof: PaymentProof, option: PaymentOption, payer: Address): void {
  if (
    proof.memo !== option.memo ||
    proof.amount !== option.amount ||
    proof.network !== option.network ||
    !sameAddress(proof.payTo, option.payTo) ||
    !sameAddress(proof.token, option.token) ||
    !sameAddress(proof.payer, payer)
  ) {
    throw new TollgateError("InvalidPaymentProof", "the facilitator returned a proof for other terms", {
      details: { memo: proof.memo === option.memo, amount: proof.amount, payer: proof.payer },
    });
  }
}
