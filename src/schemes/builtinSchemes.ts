/**
 * The built-in schemes, in precedence order: when a request carries credentials of several, the
 * earlier scheme's part owns it (a subscription before a one-time proof before an x402 payload, as
 * the gate has always read them). Adding a scheme is one line here (docs/schemes.md).
 */
import { channelScheme } from "./channel/index.ts";
import { exactScheme } from "./exact/index.ts";
import { meteredScheme } from "./metered/index.ts";
import { subscriptionScheme } from "./subscription/index.ts";
import type { Scheme } from "./types.ts";
import { x402ExactScheme } from "./x402Exact/index.ts";

export const builtinSchemes: readonly Scheme[] = [
  subscriptionScheme,
  meteredScheme,
  exactScheme,
  x402ExactScheme,
  channelScheme,
];
