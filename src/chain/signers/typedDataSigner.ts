import type { LocalAccount } from "viem";

/**
 * What Tollgate's signers need: an address and EIP-712 signing. A viem local account
 * (`privateKeyToAccount`, `mnemonicToAccount`) satisfies it as is.
 */
export type TypedDataSigner = Pick<LocalAccount, "address" | "signTypedData">;
