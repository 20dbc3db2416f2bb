/**
 * Which account a FiatToken (USDC) blacklist refusal is about. The token reverts with "account is
 * blacklisted" whichever of the transfer's accounts its blacklister listed; the payer and the provider
 * each need to know whether it was theirs, so the refusal is completed with `account`, `role` and `token`.
 *
 * Cost: nothing on a payment that goes through. The simulation every payment already gets (and the batch's
 * receipt) says a blacklist refused it; only then are `isBlacklisted` read, one per party, in parallel.
 */
import { type Address, getAddress } from "viem";
import { getIsBlacklisted } from "../chain/actions/usdc/getIsBlacklisted.ts";
import type { ReadClient } from "../chain/clientTypes.ts";
import { TollgateError } from "../protocol/errors.ts";

/** The accounts of a transfer whose blacklisting stops it. */
export type BlacklistParties = { payer: Address; payee?: Address | undefined };

/**
 * `refusal` itself unless it is `AccountBlacklisted`; then the same code with the blacklisted account named
 * (the payer first when both are). A read that fails, or finds neither listed (lifted since), leaves the
 * refusal as the chain gave it, with the token.
 */
export async function nameBlacklistedAccount(
  client: ReadClient,
  refusal: TollgateError,
  { token, parties }: { token: Address; parties: BlacklistParties },
): Promise<TollgateError> {
  if (refusal.code !== "AccountBlacklisted") return refusal;
  const roles = (["payer", "payee"] as const).filter((role) => parties[role] !== undefined);
  const listed = await Promise.all(
    roles.map((role) => getIsBlacklisted(client, { token, account: parties[role]! }).catch(() => false)),
  );
  const role = roles.find((_, i) => listed[i]);
  const details = { ...refusal.details, token };
  if (role === undefined) {
    return new TollgateError("AccountBlacklisted", refusal.message, { cause: refusal.cause, details });
  }
  // Checksummed, whether the caller had it from the wire or from the store (lower case).
  const account = getAddress(parties[role]!);
  return new TollgateError(
    "AccountBlacklisted",
    `the token's issuer has blacklisted the ${role} ${account}; the token refuses every transfer from or to it`,
    { cause: refusal.cause, details: { ...details, account, role } },
  );
}

/** The account and role an `AccountBlacklisted` refusal names, as event data; empty for any other. */
export function blacklistedFields(refusal: TollgateError): { account?: string; role?: string } {
  const { account, role } = refusal.details ?? {};
  return refusal.code === "AccountBlacklisted" && typeof account === "string" && typeof role === "string"
    ? { account, role }
    : {};
}
