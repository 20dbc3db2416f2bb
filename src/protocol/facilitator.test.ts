import { generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import { base64UrlEncode } from "./base64.ts";
import {
  AuthorizeResponseSchema,
  HealthSchema,
  JwkSchema,
  JwksSchema,
  SupportedResponseSchema,
  VerifyResponseSchema,
} from "./facilitator.ts";

describe("facilitator wire schemas", () => {
  it("accepts the JWK node:crypto exports for an Ed25519 key", () => {
    const { publicKey } = generateKeyPairSync("ed25519");
    const jwk = { ...publicKey.export({ format: "jwk" }), kid: "k1", alg: "EdDSA", use: "sig" };
    expect(JwksSchema.parse({ keys: [jwk] }).keys[0]).toEqual(jwk);
  });

  it("refuses keys that are not Ed25519 public keys", () => {
    const x = base64UrlEncode(new Uint8Array(32).fill(7));
    expect(JwkSchema.safeParse({ kty: "OKP", crv: "Ed25519", x, kid: "k" }).success).toBe(true);
    expect(JwkSchema.safeParse({ kty: "OKP", crv: "X25519", x, kid: "k" }).success).toBe(false);
    expect(JwkSchema.safeParse({ kty: "EC", crv: "Ed25519", x, kid: "k" }).success).toBe(false);
    expect(
      JwkSchema.safeParse({ kty: "OKP", crv: "Ed25519", x: base64UrlEncode(new Uint8Array(33)), kid: "k" })
        .success,
    ).toBe(false);
    expect(JwkSchema.safeParse({ kty: "OKP", crv: "Ed25519", x, kid: "" }).success).toBe(false);
  });

  it("describes networks, tokens with their EIP-712 domain, and contracts in /supported", () => {
    const supported = SupportedResponseSchema.parse({
      version: "1",
      schemes: ["exact", "subscription"],
      networks: [
        {
          network: "eip155:31337",
          tokens: [
            {
              address: "0x5fbdb2315678afecb367f032d93f642f64180aa3",
              symbol: "USDC",
              decimals: 6,
              eip712: { name: "USD Coin", version: "2" },
            },
          ],
          batchSettler: "0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0",
          subscriptionManager: "0xe7f1725e7734ce288f8367e1bb143e90bb3f0512",
        },
      ],
    });
    expect(supported.networks[0]?.tokens[0]?.address).toBe("0x5FbDB2315678afecb367f032d93F642f64180aa3");
    expect(SupportedResponseSchema.safeParse({ ...supported, schemes: ["upto"] }).success).toBe(false);
  });

  it("carries a proof in the /authorize reply", () => {
    const proof = {
      v: "1",
      kid: "k1",
      scheme: "exact",
      network: "eip155:31337",
      token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
      amount: "500000",
      payer: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
      payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      memo: `e30.${"A".repeat(43)}`,
      tx: `0x${"ab".repeat(32)}`,
      iat: 1,
      exp: 2,
      sig: `${"A".repeat(85)}A`,
    };
    const settled = { transaction: proof.tx, blockNumber: "12", batchSize: 3 };
    expect(AuthorizeResponseSchema.parse({ proof, settled })).toEqual({ proof, settled });
    expect(AuthorizeResponseSchema.safeParse({ proof: { ...proof, sig: undefined } }).success).toBe(false);
  });

  it("reports an invalid proof as data", () => {
    expect(VerifyResponseSchema.parse({ valid: false, reason: "unknown_kid" })).toEqual({
      valid: false,
      reason: "unknown_kid",
    });
    expect(VerifyResponseSchema.safeParse({ valid: "no" }).success).toBe(false);
  });

  it("parses health replies", () => {
    expect(
      HealthSchema.parse({ status: "degraded", checks: { chain: { ok: false, message: "timeout" } } }).status,
    ).toBe("degraded");
    expect(HealthSchema.safeParse({ status: "fine" }).success).toBe(false);
  });
});
