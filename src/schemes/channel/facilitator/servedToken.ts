/**
 * Channels in tokens this facilitator does not serve are not its business. TollgateChannels opens a
 * channel in any contract that behaves like a token, and a fake one makes `ChannelOpened` (and every
 * later event) name a payer who signed nothing and a payee who sold nothing. So a channel enters the
 * `channels` table — whose rows drive claims, closes, relayed transactions and the payee's webhook
 * events — only in a token of `FacilitatorContext.tokens` (docs/channels.md, "Threats and what stops each").
 */
import { TollgateError } from "../../../protocol/errors.ts";

/** The served token of a channel, or `undefined` when its token is not one of `tokens`. */
export function servedTokenOf<T extends { address: string }>(
  tokens: readonly T[],
  channel: { token: string },
): T | undefined {
  const token = channel.token.toLowerCase();
  return tokens.find((t) => t.address.toLowerCase() === token);
}

/** The served token of a channel; throws `UnsupportedToken` for any other. */
export function requireServedToken<T extends { address: string }>(
  tokens: readonly T[],
  channel: { token: string },
): T {
  const served = servedTokenOf(tokens, channel);
  if (served === undefined) {
    throw new TollgateError("UnsupportedToken", "this facilitator does not serve channels in that token");
  }
  return served;
}
