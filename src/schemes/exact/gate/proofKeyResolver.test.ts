import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { signProofFor } from "../../../../test/support/signProofFor.ts";
import { jwksOf, proofKeyFromSeed } from "../../../facilitator/proofKeys.ts";
import { paymentGate } from "../../../gate/paymentGate.ts";
import { createFixedClock, unixSeconds } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { Jwks } from "../../../protocol/facilitator.ts";
import { encodeJsonHeader } from "../../../protocol/header.ts";
import { PaymentRequiredSchema } from "../../../protocol/paymentRequired.ts";
import { createJwksResolver, createStaticKeyResolver } from "./proofKeyResolver.ts";

const oldKey = proofKeyFromSeed(new Uint8Array(32).fill(1));
const newKey = proofKeyFromSeed(new Uint8Array(32).fill(2));
const START_MS = 1_763_800_000_000;

/** A JWKS source that counts its fetches and can be switched to other keys or to failing. */
function jwksSource(initial: Jwks) {
  const state = { jwks: initial, up: true, fetches: 0 };
  return {
    state,
    loadJwks: async (): Promise<Jwks> => {
      state.fetches++;
      if (!state.up) throw new Error("connection refused");
      return state.jwks;
    },
  };
}

describe("createJwksResolver", () => {
  it("fetches the JWKS once and serves known kids from the cache", async () => {
    const source = jwksSource(jwksOf([oldKey]));
    const resolver = createJwksResolver({ loadJwks: source.loadJwks, clock: createFixedClock(START_MS) });
    for (let i = 0; i < 5; i++) expect(await resolver.resolve(oldKey.kid)).toBeDefined();
    expect(source.state.fetches).toBe(1);
  });

  it("shares one in-flight fetch between concurrent first lookups", async () => {
    const source = jwksSource(jwksOf([oldKey]));
    const resolver = createJwksResolver({ loadJwks: source.loadJwks, clock: createFixedClock(START_MS) });
    const keys = await Promise.all(Array.from({ length: 10 }, () => resolver.resolve(oldKey.kid)));
    expect(keys.every((key) => key !== undefined)).toBe(true);
    expect(source.state.fetches).toBe(1);
  });

  it("refreshes on an unknown kid (key rotation) and then knows the new key", async () => {
    const clock = createFixedClock(START_MS);
    const source = jwksSource(jwksOf([oldKey]));
    const resolver = createJwksResolver({ loadJwks: source.loadJwks, clock, minRefreshMs: 30_000 });
    await resolver.resolve(oldKey.kid);
    source.state.jwks = jwksOf([oldKey, newKey]);
    clock.advance(30_000);
    expect(await resolver.resolve(newKey.kid)).toBeDefined();
    expect(source.state.fetches).toBe(2);
    expect(await resolver.resolve(newKey.kid)).toBeDefined();
    expect(source.state.fetches).toBe(2);
  });

  it("refreshes for unknown kids at most once per minRefreshMs, so made-up kids cannot flood the facilitator", async () => {
    const clock = createFixedClock(START_MS);
    const source = jwksSource(jwksOf([oldKey]));
    const resolver = createJwksResolver({ loadJwks: source.loadJwks, clock, minRefreshMs: 30_000 });
    await resolver.resolve(oldKey.kid);
    clock.advance(30_000);
    for (let i = 0; i < 20; i++) expect(await resolver.resolve(`made-up-${i}`)).toBeUndefined();
    expect(source.state.fetches).toBe(2);
    clock.advance(29_999);
    expect(await resolver.resolve("made-up-again")).toBeUndefined();
    expect(source.state.fetches).toBe(2);
    clock.advance(1);
    expect(await resolver.resolve("made-up-again")).toBeUndefined();
    expect(source.state.fetches).toBe(3);
  });

  it("throws ChainUnavailable while the JWKS cannot be fetched, and keeps serving keys it already has", async () => {
    const clock = createFixedClock(START_MS);
    const source = jwksSource(jwksOf([oldKey]));
    const resolver = createJwksResolver({ loadJwks: source.loadJwks, clock, minRefreshMs: 1_000 });
    await resolver.resolve(oldKey.kid);
    source.state.up = false;
    clock.advance(1_000);
    const error = await resolver.resolve(newKey.kid).then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    expect(error).toBeInstanceOf(TollgateError);
    expect((error as TollgateError).code).toBe("ChainUnavailable");
    expect(await resolver.resolve(oldKey.kid)).toBeDefined();
  });
});

describe("createStaticKeyResolver", () => {
  it("knows exactly the pinned keys", async () => {
    const resolver = createStaticKeyResolver(jwksOf([oldKey]));
    expect(await resolver.resolve(oldKey.kid)).toBeDefined();
    expect(await resolver.resolve(newKey.kid)).toBeUndefined();
  });
});

describe("paymentGate with the facilitator's JWKS", () => {
  /**
   * A facilitator that serves only `GET /.well-known/jwks.json` (its real wire format), counting
   * requests; proofs are signed with its keys as it would sign them after settlement.
   */
  function setup() {
    const clock = createFixedClock(START_MS);
    const facilitator = { keys: [oldKey], jwksRequests: 0 };
    const app = new Hono();
    app.get("/.well-known/jwks.json", (c) => {
      facilitator.jwksRequests++;
      return c.json(jwksOf(facilitator.keys));
    });
    const gate = paymentGate({
      payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      network: "eip155:31337",
      token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
      facilitator: "http://facilitator.test",
      fetch: async (input, init) => app.fetch(new Request(input, init)),
      memoSecret: "a-test-memo-secret-that-is-at-least-32-bytes-long",
      clock,
      pricing: [{ type: "one-time", price: "0.01" }],
    });
    const request = (header?: string) => ({
      method: "GET",
      url: "http://api.test/data",
      headers: { get: (name: string) => (name.toLowerCase() === "x-payment" ? (header ?? null) : null) },
    });
    const paidHeader = async (key = oldKey) => {
      const unpaid = await gate(request());
      if (unpaid.kind !== "respond") throw new Error("expected a 402");
      const option = PaymentRequiredSchema.parse(await unpaid.response.json()).accepts[0]!;
      return encodeJsonHeader(signProofFor(key, option, unixSeconds(clock)));
    };
    return { clock, facilitator, gate, request, paidHeader };
  }

  it("fetches the JWKS once for many proofs, and once more when the facilitator rotates its key", async () => {
    const kit = setup();
    for (let i = 0; i < 5; i++) {
      expect((await kit.gate(kit.request(await kit.paidHeader()))).kind).toBe("pass");
    }
    expect(kit.facilitator.jwksRequests).toBe(1);

    kit.facilitator.keys = [oldKey, newKey];
    kit.clock.advance(30_000);
    expect((await kit.gate(kit.request(await kit.paidHeader(newKey)))).kind).toBe("pass");
    expect((await kit.gate(kit.request(await kit.paidHeader(newKey)))).kind).toBe("pass");
    expect(kit.facilitator.jwksRequests).toBe(2);
  });
});
