/**
 * Sub-auth tokens of subscribers that are smart-contract wallets (ERC-1271). A wallet's token is signed
 * by a key the wallet trusts (its owner), so it recovers to that key, not to the subscriber; the gate
 * then asks the subscriber's `isValidSignature` about the token's EIP-191 hash, as OpenZeppelin's
 * SignatureChecker does on chain.
 *
 * Cost and abuse: only a token that passed every free check and names an existing subscription whose
 * subscriber is not the recovered signer gets here (createSubscriptionGate.ts). Each check is one
 * `eth_call` capped at ERC1271_CHECK_GAS gas (an address without code answers nothing: no); at most
 * `perSubscriber` checks per subscriber per minute, so junk tokens naming one wallet's subscription cost
 * a bounded number of calls. An accepted token is cached by the verifier like any other, so a wallet
 * reusing its token (as the payer library does) costs one check per token.
 *
 * Junk must not lock the wallet out: anyone can sign tokens with fresh keys naming a wallet's
 * subscription and spend that wallet's window. So a key the wallet has accepted before (its owner) is
 * counted in a window of its own per subscriber, not in the shared one, and its next token (a new
 * `iat`, another gate's audience) is still asked about while strangers' junk is refused. Being known
 * only decides which window a check is counted in; every token is still put to the wallet, so an owner
 * the wallet has since removed is refused.
 */
import { type Address, hashMessage, type PublicClient } from "viem";
import { isValidErc1271Signature } from "../../../chain/signers/isValidErc1271Signature.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { splitSubAuthToken, subAuthMessage } from "../../../protocol/subscriptionAuth.ts";

/**
 * Whether `subscriber`, a wallet, accepts `token`'s signature, which recovers to `signer`; false when
 * it cannot be asked now.
 */
export type WalletSubAuthCheck = (subscriber: Address, token: string, signer: Address) => Promise<boolean>;

export function createWalletSubAuthCheck(options: {
  client: Pick<PublicClient, "request">;
  clock: Clock;
  /** Chain checks per subscriber per minute (default 30). */
  perSubscriber?: number | undefined;
  /** Subscribers whose counts are kept (default 10 000; the oldest window is dropped first). */
  maxSubscribers?: number | undefined;
  /** Keys remembered as accepted by their wallet (default 10 000; the oldest is forgotten first). */
  maxKnownSigners?: number | undefined;
}): WalletSubAuthCheck {
  const perSubscriber = options.perSubscriber ?? 30;
  const maxSubscribers = options.maxSubscribers ?? 10_000;
  // Fixed one-minute windows; insertion-ordered, so the first key is the oldest window.
  const windows = new Map<string, { start: number; count: number }>();
  /** `subscriber:signer` pairs the wallet accepted; insertion-ordered, refreshed on each acceptance. */
  const known = new Set<string>();
  const maxKnown = options.maxKnownSigners ?? 10_000;

  const take = (key: string): boolean => {
    const now = options.clock.now();
    const current = windows.get(key);
    if (current !== undefined && now - current.start < 60_000) {
      if (current.count >= perSubscriber) return false;
      current.count++;
      return true;
    }
    windows.delete(key);
    if (windows.size >= maxSubscribers) {
      const oldest = windows.keys().next();
      if (oldest.done !== true) windows.delete(oldest.value);
    }
    windows.set(key, { start: now, count: 1 });
    return true;
  };

  return async (subscriber, token, signer) => {
    let split: ReturnType<typeof splitSubAuthToken>;
    try {
      split = splitSubAuthToken(token);
    } catch {
      return false;
    }
    const pair = `${subscriber.toLowerCase()}:${signer.toLowerCase()}`;
    if (!take(known.has(pair) ? pair : subscriber.toLowerCase())) return false;
    const accepted = await isValidErc1271Signature(options.client, {
      address: subscriber,
      hash: hashMessage(subAuthMessage(split.payload)),
      signature: split.signature,
    }).catch(() => false);
    if (accepted) {
      known.delete(pair);
      if (known.size >= maxKnown) {
        const oldest = known.values().next();
        if (oldest.done !== true) known.delete(oldest.value);
      }
      known.add(pair);
    }
    return accepted;
  };
}
