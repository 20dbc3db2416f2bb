/**
 * Circle's FiatToken (USDC) reverts with `Error(string)` messages, not custom errors. This table gives
 * each message a short name for the refusal (`AuthorizationAlreadyUsed`, `ERC20InsufficientBalance` as
 * OpenZeppelin's ERC-20 spells it, …), so code reading a revert matches on names, not on Circle's prose.
 *
 * The messages are FiatToken v2.2's exactly, as they stand in its bytecode and in that of the
 * SignatureChecker library it calls to check an EOA's signature (src/chain/contracts/circle-usdc);
 * test/usdc.devnet.test.ts and test/contracts.usdc.test.ts trigger them on a devnet.
 */
const byMessage: Readonly<Record<string, string>> = {
  "FiatTokenV2: invalid signature": "InvalidSignature",
  "EIP2612: invalid signature": "InvalidSignature",
  // SignatureChecker's ECRecover: a high-s or bad-v signature (malleable or malformed), or one that
  // recovers no address.
  "ECRecover: invalid signature": "InvalidSignature",
  "ECRecover: invalid signature length": "InvalidSignature",
  "ECRecover: invalid signature 'v' value": "InvalidSignature",
  "ECRecover: invalid signature 's' value": "InvalidSignature",
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

/** The error name for a FiatToken revert message, or `undefined` for one not in the table. */
export function fiatTokenRevertName(message: string): string | undefined {
  return Object.hasOwn(byMessage, message) ? byMessage[message] : undefined;
}
