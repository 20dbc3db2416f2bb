import { describe, expect, it } from "vitest";
import { signProofFor } from "../../../../test/support/signProofFor.ts";
import { jwksOf, proofKeyFromSeed } from "../../../facilitator/proofKeys.ts";
import type { FetchFn } from "../../../http/facilitatorClient.ts";
import { createFixedClock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { encodeJsonHeader } from "../../../protocol/header.ts";
import type { PaymentOption } from "../../../protocol/paymentRequired.ts";
import { createProofVerifier, verifyPaymentProof } from "./verifyPaymentProof.ts";

const NOW = 1_763_800_000;
const facilitatorKey = proofKeyFromSeed(new Uint8Array(32).fill(7));
const strangerKey = proofKeyFromSeed(new Uint8Array(32).fill(9));
const jwks = jwksOf([facilitatorKey]);
const option: PaymentOption = {
  scheme: "exact",
  network: "eip155:31337",
  token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
  amount: "500000",
  payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  memo: `${"a".repeat(40)}.${"b".repeat(43)}`,
};
const proof = signProofFor(facilitatorKey, option, NOW);

/** A facilitator that serves only its JWKS, counting fetches. */
function jwksServer() {
  let fetches = 0;
  const fetch: FetchFn = async (input) => {
    expect(String(input)).toBe("http://facilitator.test/.well-known/jwks.json");
    fetches++;
    return Response.json(jwks);
  };
  return { fetch, fetches: () => fetches };
}

describe("verifyPaymentProof (the specification's call)", () => {
  const clock = createFixedClock(NOW * 1000);

  it("is true for a genuine proof, called as verifyPaymentProof(proof) on a configured verifier", async () => {
    const server = jwksServer();
    const { verifyPaymentProof } = createProofVerifier({
      facilitator: "http://facilitator.test",
      fetch: server.fetch,
      clock,
    });
    expect(await verifyPaymentProof(proof)).toBe(true);
    expect(await verifyPaymentProof(encodeJsonHeader(proof))).toBe(true);
    // The JWKS is cached by the verifier.
    expect(server.fetches()).toBe(1);
  });

  it("is false for a forged, altered, expired or malformed proof", async () => {
    const { verifyPaymentProof } = createProofVerifier({ keys: jwks, clock });
    expect(await verifyPaymentProof(signProofFor(strangerKey, option, NOW))).toBe(false);
    expect(await verifyPaymentProof({ ...proof, amount: "5000000" })).toBe(false);
    expect(await verifyPaymentProof(signProofFor(facilitatorKey, option, NOW - 400))).toBe(false);
    expect(await verifyPaymentProof({ hello: "world" })).toBe(false);
    expect(await verifyPaymentProof(undefined)).toBe(false);
  });

  it("takes its facilitator as an option on the bare call", async () => {
    const server = jwksServer();
    expect(
      await verifyPaymentProof(proof, { facilitator: "http://facilitator.test", fetch: server.fetch, clock }),
    ).toBe(true);
  });

  it("with nothing to verify against, rejects with a typed error saying what is missing, not a TypeError", async () => {
    const error = await verifyPaymentProof(proof).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TollgateError);
    expect(error).toMatchObject({ code: "InvalidRequest", details: { reason: "no_verifier" } });
    expect((error as Error).message).toMatch(/facilitator.*keys.*publicClient/);
  });

  it("says it cannot tell (ChainUnavailable) when the JWKS cannot be fetched, instead of false", async () => {
    const down: FetchFn = async () => {
      throw new Error("connection refused");
    };
    const { verifyPaymentProof } = createProofVerifier({
      facilitator: "http://facilitator.test",
      fetch: down,
      clock,
    });
    await expect(verifyPaymentProof(proof)).rejects.toMatchObject({ code: "ChainUnavailable" });
  });
});
