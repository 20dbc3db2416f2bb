/**
 * The token a bench's devnet settles in, as the bench prints it: its kind (Circle's FiatToken v2.2, the
 * only token a devnet runs on), its EIP-712 domain as read from the chain, and its address, so a result
 * says what it was measured on.
 */
import type { Address } from "viem";
import type { Devnet, DevnetToken } from "../../src/chain/startDevnet.ts";

export type BenchToken = { kind: DevnetToken; name: string; version: string; address: Address };

/** The devnet's token, for a header line or a JSON record. */
export function benchToken(devnet: Pick<Devnet, "token" | "contracts">): BenchToken {
  return {
    kind: devnet.token.kind,
    name: devnet.token.name,
    version: devnet.token.version,
    address: devnet.contracts.usd,
  };
}

/** One line: `token: Circle's FiatToken v2.2 (USDC), EIP-712 "USD Coin"/"2", at 0x…`. */
export function describeBenchToken(token: BenchToken): string {
  const kind = token.kind === "usdc" ? "Circle's FiatToken v2.2 (USDC)" : token.kind;
  return `token: ${kind}, EIP-712 "${token.name}"/"${token.version}", at ${token.address}`;
}
