/**
 * The checks a relayed channel deposit makes on the payer's EIP-3009 ReceiveWithAuthorization before any
 * simulation, shared by the open (`POST /channels`) and the top-up (`POST /channels/:id/top-up`):
 * - the validity window, with no I/O (`checkAuthorizationWindow`);
 * - the signature, recovered locally; a signer other than the payer is refused unless the payer has code
 *   (an ERC-1271 wallet, which the token checks in the simulation) (`checkReceiveAuthorization`, and
 *   `checkPayerSigned` for the payer's other signed requests);
 * - the payer's balance (`checkPayerBalance`).
 * Each caller keeps its own words for a refusal: the error codes are the same, the messages name the
 * open or the top-up.
 */
import { type Address, type Hex, type PublicClient, recoverTypedDataAddress } from "viem";
import { getTokenBalance } from "../../../chain/actions/usd/getTokenBalance.ts";
import { receiveWithAuthorizationTypes } from "../../../chain/signers/eip712Types.ts";
import type { FacilitatorToken } from "../../../facilitator/facilitatorToken.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { toChannelError } from "./channelErrors.ts";

/** The signed fields of a ReceiveWithAuthorization as they come over the wire. */
export type ReceiveAuthorization = {
  amount: string;
  validAfter: string;
  validBefore: string;
  signature: Hex;
};

/** Refuses an authorization that expired, expires within `minRemainingSeconds`, or is not valid yet. */
export function checkAuthorizationWindow(
  clock: Clock,
  minRemainingSeconds: number,
  auth: Pick<ReceiveAuthorization, "validAfter" | "validBefore">,
): void {
  const now = BigInt(Math.floor(clock.now() / 1000));
  if (BigInt(auth.validBefore) <= now + BigInt(minRemainingSeconds)) {
    throw new TollgateError(
      "AuthorizationExpired",
      "authorization has expired or expires too soon to relay",
      {
        details: { validBefore: auth.validBefore, now: now.toString() },
      },
    );
  }
  if (BigInt(auth.validAfter) >= now) {
    throw new TollgateError("AuthorizationExpired", "authorization is not valid yet", {
      details: { validAfter: auth.validAfter, now: now.toString() },
    });
  }
}

/**
 * Passes when `recover` yields the payer, or when the payer has code (only a contract wallet may still
 * have signed: ERC-1271, left to the simulation); otherwise `InvalidSignature` with `refusal`.
 */
export async function checkPayerSigned(
  client: Pick<PublicClient, "getCode">,
  payer: Address,
  recover: () => Promise<Address>,
  refusal: string,
): Promise<void> {
  let signer: Address | undefined;
  try {
    signer = await recover();
  } catch {
    signer = undefined;
  }
  if (signer !== undefined && signer.toLowerCase() === payer.toLowerCase()) return;
  const code = await client.getCode({ address: payer }).catch((e: unknown) => {
    throw toChannelError(e);
  });
  if (code === undefined || code === "0x") throw new TollgateError("InvalidSignature", refusal);
}

/** Checks that `payer` signed a ReceiveWithAuthorization of `auth` to `to` in `token` with `nonce`. */
export function checkReceiveAuthorization(
  client: Pick<PublicClient, "getCode">,
  params: {
    chainId: number;
    token: FacilitatorToken;
    payer: Address;
    to: Address;
    nonce: Hex;
    auth: ReceiveAuthorization;
    refusal: string;
  },
): Promise<void> {
  const { chainId, token, payer, to, nonce, auth } = params;
  return checkPayerSigned(
    client,
    payer,
    () =>
      recoverTypedDataAddress({
        domain: { name: token.name, version: token.version, chainId, verifyingContract: token.address },
        types: receiveWithAuthorizationTypes,
        primaryType: "ReceiveWithAuthorization",
        message: {
          from: payer,
          to,
          value: BigInt(auth.amount),
          validAfter: BigInt(auth.validAfter),
          validBefore: BigInt(auth.validBefore),
          nonce,
        },
        signature: auth.signature,
      }),
    params.refusal,
  );
}

/** Refuses with `InsufficientFunds` (`refusal`) when the payer's token balance is below `amount`. */
export async function checkPayerBalance(
  client: Pick<PublicClient, "readContract">,
  params: { token: Address; payer: Address; amount: string; refusal: string },
): Promise<void> {
  const balance = await getTokenBalance(client, { token: params.token, owner: params.payer }).catch(
    (e: unknown) => {
      throw toChannelError(e);
    },
  );
  if (balance < BigInt(params.amount)) {
    throw new TollgateError("InsufficientFunds", params.refusal, {
      details: { balance: balance.toString(), amount: params.amount },
    });
  }
}
