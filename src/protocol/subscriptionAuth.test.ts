import fc from "fast-check";
import { recoverMessageAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { base64UrlEncode } from "./base64.ts";
import { TollgateError } from "./errors.ts";
import {
  encodeSubAuthPayload,
  formatSubAuthToken,
  MAX_SUB_AUTH_LIFETIME,
  type SubAuthClaims,
  SubAuthClaimsSchema,
  splitSubAuthToken,
  subAuthMessage,
} from "./subscriptionAuth.ts";

// anvil's second well-known development key.
const subscriber = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const claims: SubAuthClaims = { sub: "42", aud: "https://api.example.com", iat: 1763800000, exp: 1763803600 };

async function mint(c: SubAuthClaims): Promise<string> {
  const payload = encodeSubAuthPayload(c);
  return formatSubAuthToken(payload, await subscriber.signMessage({ message: subAuthMessage(payload) }));
}

describe("sub-auth token", () => {
  it("round-trips and the EIP-191 signature recovers the subscriber", async () => {
    const token = await mint(claims);
    const { payload, claims: parsed, signature } = splitSubAuthToken(token);
    expect(parsed).toEqual(claims);
    expect(token.startsWith(`${payload}.0x`)).toBe(true);
    expect(await recoverMessageAddress({ message: subAuthMessage(payload), signature })).toBe(
      subscriber.address,
    );
  });

  it("signs the first part's text itself", () => {
    const payload = encodeSubAuthPayload(claims);
    expect(payload).toBe(
      base64UrlEncode('{"aud":"https://api.example.com","exp":1763803600,"iat":1763800000,"sub":"42"}'),
    );
    expect(subAuthMessage(payload)).toBe(payload);
  });

  it("limits the lifetime to one hour and requires exp after iat", () => {
    expect(MAX_SUB_AUTH_LIFETIME).toBe(3600);
    expect(SubAuthClaimsSchema.safeParse({ ...claims, exp: claims.iat + 3601 }).success).toBe(false);
    expect(SubAuthClaimsSchema.safeParse({ ...claims, exp: claims.iat }).success).toBe(false);
    expect(() => encodeSubAuthPayload({ ...claims, exp: claims.iat + 7200 })).toThrow(
      expect.objectContaining({ code: "InvalidRequest" }),
    );
  });

  it.each([
    "https://api.example.com/",
    "https://API.example.com",
    "https://api.example.com:443",
    "https://api.example.com/v1",
    "ftp://api.example.com",
    "https://user@api.example.com",
    "api.example.com",
  ])("refuses the non-canonical audience %j", (aud) => {
    expect(SubAuthClaimsSchema.safeParse({ ...claims, aud }).success).toBe(false);
  });

  it("accepts origins with a port and IP hosts", () => {
    for (const aud of ["http://127.0.0.1:4021", "http://localhost:8080", "https://[::1]:8443"]) {
      expect(SubAuthClaimsSchema.safeParse({ ...claims, aud }).success, aud).toBe(true);
    }
  });

  it("refuses ids that are not canonical decimals", () => {
    for (const sub of ["042", "-1", "1e3", "0x2a", 42]) {
      expect(SubAuthClaimsSchema.safeParse({ ...claims, sub }).success).toBe(false);
    }
  });

  it("answers garbage with SubscriptionAuthInvalid, never another exception", async () => {
    const signature = `0x${"11".repeat(65)}`;
    const token = await mint(claims);
    const inputs = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.string({ maxLength: 200 }).map((s) => `${s}.${signature}`),
      fc.jsonValue({ maxDepth: 2 }).map((v) => `${base64UrlEncode(JSON.stringify(v) ?? "")}.${signature}`),
      fc.integer({ min: 0, max: token.length - 1 }).map((i) => token.slice(0, i) + token.slice(i + 1)),
      fc.constant(`${token}.x`),
      fc.constant("A".repeat(5000)),
    );
    fc.assert(
      fc.property(inputs, (text) => {
        try {
          splitSubAuthToken(text);
        } catch (error) {
          expect(error).toBeInstanceOf(TollgateError);
          expect((error as TollgateError).code).toBe("SubscriptionAuthInvalid");
        }
      }),
      { numRuns: 1500 },
    );
  });
});
