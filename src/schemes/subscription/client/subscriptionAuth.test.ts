import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { createFixedClock } from "../../../protocol/clock.ts";
import { splitSubAuthToken } from "../../../protocol/subscriptionAuth.ts";
import { createSubAuthVerifier } from "../gate/createSubAuthVerifier.ts";
import { createSubscriptionAuth } from "./subscriptionAuth.ts";

const ORIGIN = "https://api.example.com";
const START_MS = 1_763_800_000_000;

function counted() {
  const account = privateKeyToAccount(generatePrivateKey());
  let signatures = 0;
  return {
    account,
    get signatures() {
      return signatures;
    },
    signer: {
      address: account.address,
      signMessage: (args: { message: string }) => {
        signatures++;
        return account.signMessage(args);
      },
    },
  };
}

describe("createSubscriptionAuth", () => {
  it("mints a token a gate accepts: claims for the id and audience, at most an hour, signed by the subscriber", async () => {
    const clock = createFixedClock(START_MS);
    const { signer, account } = counted();
    const auth = createSubscriptionAuth({ signer, clock });
    const headers = await auth.headers(42n, ORIGIN);
    expect(headers["X-Tollgate-Sub"]).toBe("42");
    const token = headers["X-Tollgate-Sub-Auth"]!;
    const { claims } = splitSubAuthToken(token);
    expect(claims.sub).toBe("42");
    expect(claims.aud).toBe(ORIGIN);
    expect(claims.exp - claims.iat).toBe(3600);
    expect(claims.iat).toBeLessThanOrEqual(START_MS / 1000);
    const verdict = await createSubAuthVerifier({ audience: ORIGIN, clock }).verify(token, "42");
    expect(verdict).toEqual({ ok: true, signer: account.address });
  });

  it("reuses a token until five minutes before it expires, then signs a new one", async () => {
    const clock = createFixedClock(START_MS);
    const signing = counted();
    const auth = createSubscriptionAuth({ signer: signing.signer, clock });
    const first = await auth.token(7n, ORIGIN);
    clock.advance(3_000_000); // 50 minutes: 10 minutes (minus the back-dating) left
    expect(await auth.token("7", ORIGIN)).toBe(first);
    expect(signing.signatures).toBe(1);
    clock.advance(360_000);
    const second = await auth.token(7n, ORIGIN);
    expect(second).not.toBe(first);
    expect(signing.signatures).toBe(2);
  });

  it("keeps one token per subscription and audience, and shares a signing among concurrent callers", async () => {
    const clock = createFixedClock(START_MS);
    const signing = counted();
    const auth = createSubscriptionAuth({ signer: signing.signer, clock });
    const tokens = await Promise.all([
      auth.token(1n, ORIGIN),
      auth.token(1n, ORIGIN),
      auth.token(1n, ORIGIN),
    ]);
    expect(new Set(tokens).size).toBe(1);
    await auth.token(2n, ORIGIN);
    await auth.token(1n, "https://other.example.com");
    expect(signing.signatures).toBe(3);
  });

  it.each([
    ["an id that is not decimal", "0x10", ORIGIN, /decimal/],
    ["an audience with a path", "1", "https://api.example.com/v1", /origin/],
    ["an audience with a trailing slash", "1", "https://api.example.com/", /origin/],
  ])("refuses %s without signing", async (_name, id, audience, message) => {
    const signing = counted();
    const auth = createSubscriptionAuth({ signer: signing.signer });
    await expect(auth.token(id, audience)).rejects.toThrow(message);
    expect(signing.signatures).toBe(0);
  });

  it("refuses a signer without signMessage and lifetimes over an hour", () => {
    const { account } = counted();
    expect(() => createSubscriptionAuth({ signer: { address: account.address } as never })).toThrow(
      /signMessage/,
    );
    expect(() => createSubscriptionAuth({ signer: account, lifetimeSeconds: 3601 })).toThrow(/lifetime/);
  });
});
