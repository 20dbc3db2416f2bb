/**
 * Circle's FiatToken (USDC) reverts with `Error(string)` messages where TollgateUSD has custom errors.
 * This table gives each message the name of the TollgateUSD (or OpenZeppelin ERC-20) error for the same
 * refusal, so code reading a revert need know one set of names whichever token a chain runs on.
 *
 * The messages are FiatToken v2.2's exactly, as they stand in its bytecode
 * (src/chain/contracts/circle-usdc/FiatTokenV2_2.ts); test/usdc.devnet.test.ts triggers them on a devnet.
 * TollgateUSD can neither pause nor blacklist, so those two names are FiatToken's alone.
 */
const byMessage: Readonly<Record<string, string>> = {
  "FiatTokenV2: invalid signature": "InvalidSignature",
  "EIP2612: invalid signature": "InvalidSignature",
  "FiatTokenV2: authorization is used or canceled": "AuthorizationAlreadyUsed",
  "FiatTokenV2: authorization is expired": "AuthorizationExpired",
  "FiatTokenV2: authorization is not yet valid": "AuthorizationNotYetValid",
  "FiatTokenV2: caller must be the payee": "CallerMustBePayee",
  "FiatTokenV2: permit is expired": "PermitExpired",
  "ERC20: transfer amount exceeds balance": "ERC20InsufficientBalance",
  "ERC20: transfer amount exceeds allowance": "ERC20InsufficientAllowance",
  "Pausable: paused": "TokenPaused",
  "Blacklistable: account is blacklisted": "AccountBlacklisted",
  "FiatTokenV2_2: Account is blacklisted": "AccountBlacklisted",
};

/** The TollgateUSD-style error name for a FiatToken revert message, or `undefined` for one not in the table. */
export function fiatTokenRevertName(message: string): string | undefined {
  return Object.hasOwn(byMessage, message) ? byMessage[message] : undefined;
}
