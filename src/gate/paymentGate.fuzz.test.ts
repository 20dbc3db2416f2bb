import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { signProofFor } from "../../test/support/signProofFor.ts";
import { jwksOf, proofKeyFromSeed } from "../facilitator/proofKeys.ts";
import { base64Encode } from "../protocol/base64.ts";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import { encodeJsonHeader } from "../protocol/header.ts";
import { PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import type { GateRequest } from "./gateRequest.ts";
import { paymentGate } from "./paymentGate.ts";

const key = proofKeyFromSeed(new Uint8Array(32).fill(11));
const clock = createFixedClock(1_763_800_000_000);
const URL_ = "http://api.test/api/item";
const gate = paymentGate({
  payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  network: "eip155:31337",
  token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
  facilitator: "http://facilitator.test",
  fetch: async () => {
    throw new Error("no network in unit tests");
  },
  memoSecret: "fuzz-test-memo-secret-at-least-thirty-two-bytes",
  clock,
  proofKeys: jwksOf([key]),
  pricing: [{ type: "one-time", price: "0.05" }],
});

/** The gate core with an `X-PAYMENT` of any text: no `Headers` object to refuse odd characters first. */
function withPayment(value: string): GateRequest {
  return {
    method: "GET",
    url: URL_,
    headers: { get: (name) => (name.toLowerCase() === "x-payment" ? value : null) },
  };
}

async function validProof() {
  const result = await gate(withPayment(""));
  if (result.kind !== "respond") throw new Error("expected a 402");
  const option = PaymentRequiredSchema.parse(await result.response.json()).accepts[0]!;
  return signProofFor(key, option, unixSeconds(clock));
}

describe("paymentGate fuzzing", () => {
  it("answers 10,000 random X-PAYMENT values with 402 only, never running the handler", async () => {
    // A genuine proof, used once, so that mutations of it meet every check down to the replay guard.
    const proof = await validProof();
    const genuine = encodeJsonHeader(proof);
    const first = await gate(withPayment(genuine));
    if (first.kind !== "pass") throw new Error("expected the genuine proof to pass");
    // Answered: the proof is used for good (not merely in flight).
    await first.complete(200);

    const fields = Object.keys(proof);
    const header = fc.oneof(
      // Any text at all, including control characters and lone surrogates.
      fc.string({ unit: "binary", maxLength: 300 }),
      // Text in the base64 alphabet, valid or not.
      fc.stringMatching(/^[A-Za-z0-9+/=]{0,400}$/),
      // base64 of arbitrary JSON.
      fc.json({ maxDepth: 3 }).map((json) => base64Encode(json)),
      // The genuine proof with one field replaced by an arbitrary JSON value (signature now stale).
      fc
        .tuple(fc.constantFrom(...fields), fc.jsonValue({ maxDepth: 2 }))
        .map(([field, value]) => base64Encode(JSON.stringify({ ...proof, [field]: value }))),
      // The genuine header with one character changed, or cut short, or padded past 8 KiB.
      fc
        .tuple(fc.nat({ max: genuine.length - 1 }), fc.constantFrom(..."A/+=Zz09-_ .".split("")))
        .map(([i, c]) => `${genuine.slice(0, i)}${c}${genuine.slice(i + 1)}`),
      fc.nat({ max: genuine.length - 1 }).map((n) => genuine.slice(0, n)),
      fc.nat({ max: 2048 }).map((n) => genuine + "A".repeat(8192 - genuine.length + n)),
      // The genuine proof itself, already consumed.
      fc.constant(genuine),
    );

    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(header, async (value) => {
        const result = await gate(withPayment(value));
        if (result.kind !== "respond") return false;
        statuses.set(result.response.status, (statuses.get(result.response.status) ?? 0) + 1);
        const body = PaymentRequiredSchema.parse(await result.response.json());
        return result.response.status === 402 && body.error === "InvalidPaymentProof";
      }),
      { numRuns: 10_000, seed: 402 },
    );
    expect([...statuses.keys()]).toEqual([402]);
    expect(statuses.get(402)).toBe(10_000);
  }, 120_000);
});
