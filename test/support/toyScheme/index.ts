/**
 * A toy payment scheme, added as docs/schemes.md tells a newcomer to: its own folder (ticket, gate
 * part, client part) and one registration — here the `schemes` option of the gate and the client.
 */
import { defineScheme } from "../../../src/schemes/registry.ts";
import { toyClient } from "./client.ts";
import { type ToySale, toyGate } from "./gate.ts";

export type { ToySale } from "./gate.ts";

export function createToyScheme(secret: Uint8Array, sales: ToySale[] = []) {
  return defineScheme({
    id: "toy",
    description: "pays with tickets of a toy bank (HMAC, shared secret): a seam test, not money",
    gate: toyGate(secret, sales),
    client: toyClient(secret),
  });
}
