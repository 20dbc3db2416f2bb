/**
 * A payer's paying `fetch` for each stack of `paidRequests.ts`, built from what a separate payer
 * process can be sent (a private key and the stack's public terms): Tollgate's `fetchWithPayment` with
 * `createPayer`, and x402's `wrapFetchWithPayment` with `@x402/evm`'s exact client scheme.
 */
import { x402Client } from "@x402/core/client";
import { ExactEvmScheme as ExactEvmClientScheme } from "@x402/evm/exact/client";
import { wrapFetchWithPayment } from "@x402/fetch";
import type { Address, Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { privateKeyAccount } from "../../src/chain/signers/privateKeyAccount.ts";
import { createPayer } from "../../src/client/createPayer.ts";
import { fetchWithPayment } from "../../src/client/fetchWithPayment.ts";
import type { FetchFn } from "../../src/http/facilitatorClient.ts";
import type { Network } from "../../src/protocol/network.ts";

export type PayerSpec =
  | { kind: "tollgate"; network: Network; facilitatorUrl: string; maxPrice: string }
  | { kind: "x402"; network: Network; asset: Address };

export function payingFetchOf(spec: PayerSpec, privateKey: Hex): FetchFn {
  if (spec.kind === "tollgate") {
    // Tollgate's own account helper (EIP-3009 transfers signed with libsecp256k1); x402's examples
    // build their signer with viem's privateKeyToAccount, as below.
    return fetchWithPayment(
      fetch,
      createPayer({
        account: privateKeyAccount(privateKey),
        network: spec.network,
        facilitator: spec.facilitatorUrl,
        fetch,
      }),
      { maxPrice: BigInt(spec.maxPrice) },
    );
  }
  // x402 v2 clients refuse assets they do not know until allowed.
  return wrapFetchWithPayment(
    fetch,
    new x402Client()
      .register(
        spec.network as `${string}:${string}`,
        new ExactEvmClientScheme(privateKeyToAccount(privateKey)),
      )
      .setSpendControls({ allowedAssets: [{ network: spec.network, asset: spec.asset }] }),
  ) as FetchFn;
}

/** Paying fetches by payer index, each built on first use (with a payer process, only the warm-up's). */
export function lazyPayingFetches(spec: PayerSpec, keys: readonly Hex[]): (index: number) => FetchFn {
  const built = new Map<number, FetchFn>();
  return (index) => {
    const known = built.get(index);
    if (known !== undefined) return known;
    const made = payingFetchOf(spec, keys[index]!);
    built.set(index, made);
    return made;
  };
}
