/**
 * The signed payment (docs/protocol.md, "Signed payment"): an EIP-3009 `TransferWithAuthorization` the payer signs for the
 * token's EIP-712 domain, sent to the facilitator's `POST /authorize`. Its nonce is
 * `keccak256(utf8(memo))`, binding the transfer to one 402 offer.
 */
import type { Address, TypedDataDomain } from "viem";
import { z } from "zod";
import { AddressSchema, Hex32Schema, SignatureSchema } from "./address.ts";
import { AtomicAmountSchema, UintStringSchema } from "./amount.ts";
import { MemoSchema } from "./memo.ts";
import { NetworkSchema } from "./network.ts";

/**
 * The EIP-3009 authorization message with its uint256 fields as decimal strings, the field names and
 * text form x402's `exact` EVM payload also uses. `validBefore` is exclusive and `validAfter`
 * exclusive too (EIP-3009: `now > validAfter && now < validBefore`).
 */
export const AuthorizationSchema = z.object({
  from: AddressSchema,
  to: AddressSchema,
  value: AtomicAmountSchema,
  validAfter: UintStringSchema,
  validBefore: UintStringSchema,
  nonce: Hex32Schema,
});
export type Authorization = z.infer<typeof AuthorizationSchema>;

/** The body of `POST /authorize` minus its envelope (docs/protocol.md, "Signed payment"). */
export const SignedPaymentSchema = z.object({
  scheme: z.literal("exact"),
  network: NetworkSchema,
  token: AddressSchema,
  memo: MemoSchema,
  authorization: AuthorizationSchema,
  signature: SignatureSchema,
});
export type SignedPayment = z.infer<typeof SignedPaymentSchema>;

/** `POST /authorize` request body. */
export const AuthorizeRequestSchema = z.object({ signedPayment: SignedPaymentSchema });
export type AuthorizeRequest = z.infer<typeof AuthorizeRequestSchema>;

const authorizationFields = [
  { name: "from", type: "address" },
  { name: "to", type: "address" },
  { name: "value", type: "uint256" },
  { name: "validAfter", type: "uint256" },
  { name: "validBefore", type: "uint256" },
  { name: "nonce", type: "bytes32" },
] as const;

/**
 * EIP-712 `types` for `TransferWithAuthorization(address from,address to,uint256 value,uint256
 * validAfter,uint256 validBefore,bytes32 nonce)`, ready for viem's `signTypedData`/`verifyTypedData`
 * with `primaryType: "TransferWithAuthorization"`.
 */
export const transferWithAuthorizationTypes = {
  TransferWithAuthorization: authorizationFields,
} as const;

/**
 * EIP-712 `types` for `ReceiveWithAuthorization(...)`, same fields; the contract additionally requires
 * `msg.sender == to`, which stops a front-runner from settling a payment meant for a contract.
 */
export const receiveWithAuthorizationTypes = {
  ReceiveWithAuthorization: authorizationFields,
} as const;

/** EIP-712 `types` for EIP-3009 `CancelAuthorization(address authorizer,bytes32 nonce)`. */
export const cancelAuthorizationTypes = {
  CancelAuthorization: [
    { name: "authorizer", type: "address" },
    { name: "nonce", type: "bytes32" },
  ],
} as const;

/**
 * The EIP-712 domain of an EIP-3009 token. USDC on Base and Tollgate's devnet token use
 * name "USD Coin", version "2"; always read them from `GET /supported` or the chain, never guess.
 */
export function tokenDomain(domain: {
  name: string;
  version: string;
  chainId: number;
  verifyingContract: Address;
}): TypedDataDomain {
  return {
    name: domain.name,
    version: domain.version,
    chainId: domain.chainId,
    verifyingContract: domain.verifyingContract,
  };
}

/** The wire authorization as the typed-data `message` viem signs and verifies (uint256 → bigint). */
export function authorizationMessage(authorization: Authorization): {
  from: Address;
  to: Address;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: `0x${string}`;
} {
  return {
    from: authorization.from,
    to: authorization.to,
    value: BigInt(authorization.value),
    validAfter: BigInt(authorization.validAfter),
    validBefore: BigInt(authorization.validBefore),
    nonce: authorization.nonce,
  };
}
