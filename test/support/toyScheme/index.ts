/**
 * A toy payment scheme, added as docs/schemes.md tells a newcomer to: its own folder (ticket, gate
 * part, client part, agent part, facilitator part) and one registration — the `schemes` option of the
 * gate, the payer, the paid tool (`createToyScheme`) and the facilitator (`toyFacilitator`). Nothing
 * outside this folder names it (test/schemes.seam.test.ts checks that).
 */
import { defineScheme } from "../../../src/schemes/registry.ts";
import { toyAgent } from "./agent.ts";
import { toyClient } from "./client.ts";
import { type ToySale, toyGate } from "./gate.ts";

export { toyFacilitator } from "./facilitator.ts";
export type { ToySale } from "./gate.ts";

export function createToyScheme(secret: Uint8Array, sales: ToySale[] = []) {
  return defineScheme({
    id: "toy",
    description: "pays with tickets of a toy bank (HMAC, shared secret): a seam test, not money",
    gate: toyGate(secret, sales),
    client: toyClient(secret),
    agent: toyAgent,
  });
}
