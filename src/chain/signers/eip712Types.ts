/**
 * EIP-712 type definitions of everything Tollgate signs, for signing and for verifying off chain. Each
 * matches a typehash in the contracts (USDC's FiatToken v2.2, SubscriptionManager.sol) field for field.
 */
import type { Address } from "viem";

/** The domain a token signs under: USDC's {name, version} on the network, its chain id and address. */
export type TokenDomain = { name: string; version: string; chainId: number; verifyingContract: Address };

/** EIP-3009. */
export const transferWithAuthorizationTypes = {
  TransferWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" },
  ],
} as const;

/** EIP-3009 (payee-submitted). */
export const receiveWithAuthorizationTypes = {
  ReceiveWithAuthorization: transferWithAuthorizationTypes.TransferWithAuthorization,
} as const;

/** EIP-3009. */
export const cancelAuthorizationTypes = {
  CancelAuthorization: [
    { name: "authorizer", type: "address" },
    { name: "nonce", type: "bytes32" },
  ],
} as const;

/** EIP-2612. */
export const permitTypes = {
  Permit: [
    { name: "owner", type: "address" },
    { name: "spender", type: "address" },
    { name: "value", type: "uint256" },
    { name: "nonce", type: "uint256" },
    { name: "deadline", type: "uint256" },
  ],
} as const;

/** The SubscriptionManager's domain name and version (its constructor's EIP712 arguments). */
export const subscriptionManagerDomainName = "Tollgate SubscriptionManager";
export const subscriptionManagerDomainVersion = "1";

export function subscriptionManagerDomain(chainId: number, manager: Address) {
  return {
    name: subscriptionManagerDomainName,
    version: subscriptionManagerDomainVersion,
    chainId,
    verifyingContract: manager,
  } as const;
}

export const subscribeIntentTypes = {
  Subscribe: [
    { name: "subscriber", type: "address" },
    { name: "planId", type: "uint256" },
    { name: "maxOverage", type: "uint256" },
    { name: "spendLimit", type: "uint256" },
    { name: "nonce", type: "uint256" },
    { name: "deadline", type: "uint256" },
  ],
} as const;

/** A spend limit of type(uint256).max: the subscription's total is not bounded beyond the allowance. */
export const NO_SPEND_LIMIT = 2n ** 256n - 1n;

const subscriptionAction = [
  { name: "subscriptionId", type: "uint256" },
  { name: "nonce", type: "uint256" },
  { name: "deadline", type: "uint256" },
] as const;

export const pauseIntentTypes = { Pause: subscriptionAction } as const;
export const resumeIntentTypes = { Resume: subscriptionAction } as const;
export const cancelIntentTypes = { Cancel: subscriptionAction } as const;

export const setSpendLimitIntentTypes = {
  SetSpendLimit: [
    { name: "subscriptionId", type: "uint256" },
    { name: "spendLimit", type: "uint256" },
    { name: "nonce", type: "uint256" },
    { name: "deadline", type: "uint256" },
  ],
} as const;

export const setMaxOverageIntentTypes = {
  SetMaxOverage: [
    { name: "subscriptionId", type: "uint256" },
    { name: "maxOverage", type: "uint256" },
    { name: "nonce", type: "uint256" },
    { name: "deadline", type: "uint256" },
  ],
} as const;
