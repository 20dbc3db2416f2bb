/**
 * Argument checks for the payer library's public functions: JavaScript callers (and TypeScript ones
 * through `any`) can pass anything, and a wrong argument must come back as a `TollgateError` naming
 * what was expected (`InvalidRequest`), never as a `TypeError` from deep inside.
 */
import { TollgateError } from "../protocol/errors.ts";

/** Refuses anything but a non-null object. `usage` says how the function is called. */
export function requireObject(value: unknown, usage: string): asserts value is object {
  if (typeof value !== "object" || value === null) {
    throw new TollgateError("InvalidRequest", usage, {
      details: { got: value === null ? "null" : typeof value },
    });
  }
}

/** Refuses a signer without an address and EIP-191 `signMessage` (a viem `LocalAccount` has both). */
export function requireMessageSigner(value: unknown, usage: string): void {
  requireObject(value, usage);
  const signer = value as { address?: unknown; signMessage?: unknown };
  if (typeof signer.signMessage !== "function") {
    throw new TollgateError("InvalidRequest", usage, {
      details: { got: "an account without signMessage()" },
    });
  }
}
