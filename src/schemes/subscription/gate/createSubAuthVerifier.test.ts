import { recoverMessageAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { createFixedClock, unixSeconds } from "../../../protocol/clock.ts";
import {
  encodeSubAuthPayload,
  formatSubAuthToken,
  subAuthMessage,
} from "../../../protocol/subscriptionAuth.ts";
import { createSubAuthVerifier } from "./createSubAuthVerifier.ts";

const ORIGIN = "https://api.example.com";
const account = privateKeyToAccount(generatePrivateKey());

async function mint(sub: string, iat: number, lifetime = 3600) {
  const payload = encodeSubAuthPayload({ sub, aud: ORIGIN, iat, exp: iat + lifetime });
  return formatSubAuthToken(payload, await account.signMessage({ message: subAuthMessage(payload) }));
}

function counting() {
  let calls = 0;
  return {
    get calls() {
      return calls;
    },
    recover: (message: string, signature: `0x${string}`) => {
      calls++;
      return recoverMessageAddress({ message, signature });
    },
  };
}

describe("createSubAuthVerifier", () => {
  it("recovers a token's signer once, however often the token is presented", async () => {
    const clock = createFixedClock(1_763_800_000_000);
    const recovery = counting();
    const verifier = createSubAuthVerifier({ audience: ORIGIN, clock, recover: recovery.recover });
    const token = await mint("7", unixSeconds(clock));
    for (let i = 0; i < 10; i++) {
      expect(await verifier.verify(token, "7")).toEqual({ ok: true, signer: account.address });
    }
    expect(recovery.calls).toBe(1);
  });

  it("refuses a cached token once it expires, and forgets it", async () => {
    const clock = createFixedClock(1_763_800_000_000);
    const verifier = createSubAuthVerifier({ audience: ORIGIN, clock });
    const token = await mint("7", unixSeconds(clock), 60);
    expect((await verifier.verify(token, "7")).ok).toBe(true);
    clock.advance(60_000);
    expect(await verifier.verify(token, "7")).toEqual({
      ok: false,
      reason: expect.stringMatching(/expired/),
    });
    expect(verifier.size).toBe(0);
  });

  it("holds at most maxEntries tokens, dropping the oldest", async () => {
    const clock = createFixedClock(1_763_800_000_000);
    const recovery = counting();
    const verifier = createSubAuthVerifier({
      audience: ORIGIN,
      clock,
      recover: recovery.recover,
      maxEntries: 2,
    });
    const tokens = await Promise.all(["1", "2", "3"].map((sub) => mint(sub, unixSeconds(clock))));
    for (const [i, token] of tokens.entries()) await verifier.verify(token, String(i + 1));
    expect(verifier.size).toBe(2);
    await verifier.verify(tokens[2]!, "3");
    expect(recovery.calls).toBe(3);
    await verifier.verify(tokens[0]!, "1");
    expect(recovery.calls).toBe(4);
  });

  it("does not let a cached verdict for one id serve a request naming another", async () => {
    const clock = createFixedClock(1_763_800_000_000);
    const verifier = createSubAuthVerifier({ audience: ORIGIN, clock });
    const token = await mint("7", unixSeconds(clock));
    expect((await verifier.verify(token, "7")).ok).toBe(true);
    expect(await verifier.verify(token, "8")).toMatchObject({ ok: false });
  });

  it("refuses a token failing a free check (audience, subject, expiry, issue time) without a recovery", async () => {
    const clock = createFixedClock(1_763_800_000_000);
    const recovery = counting();
    const verifier = createSubAuthVerifier({ audience: ORIGIN, clock, recover: recovery.recover });
    const now = unixSeconds(clock);
    const sign = async (claims: { sub: string; aud: string; iat: number; exp: number }) => {
      const payload = encodeSubAuthPayload(claims);
      return formatSubAuthToken(payload, await account.signMessage({ message: subAuthMessage(payload) }));
    };
    const refused = [
      await verifier.verify(
        await sign({ sub: "7", aud: "https://other.example", iat: now, exp: now + 60 }),
        "7",
      ),
      await verifier.verify(await sign({ sub: "8", aud: ORIGIN, iat: now, exp: now + 60 }), "7"),
      await verifier.verify(await sign({ sub: "7", aud: ORIGIN, iat: now - 120, exp: now - 60 }), "7"),
      await verifier.verify(await sign({ sub: "7", aud: ORIGIN, iat: now + 600, exp: now + 900 }), "7"),
      await verifier.verify("e30.0x00", "7"),
    ];
    expect(refused.map((v) => v.ok)).toEqual([false, false, false, false, false]);
    expect(recovery.calls).toBe(0);
    expect(verifier.size).toBe(0);
  });

  it("forgets a token on request, so a stranger's token for a made-up id holds no cache slot", async () => {
    const clock = createFixedClock(1_763_800_000_000);
    const recovery = counting();
    const verifier = createSubAuthVerifier({ audience: ORIGIN, clock, recover: recovery.recover });
    const token = await mint("7", unixSeconds(clock));
    expect((await verifier.verify(token, "7")).ok).toBe(true);
    verifier.forget(token);
    expect(verifier.size).toBe(0);
    expect((await verifier.verify(token, "7")).ok).toBe(true);
    expect(recovery.calls).toBe(2);
  });
});
