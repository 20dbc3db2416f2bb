import { createHmac, randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type MemoPayload, MemoPayloadSchema } from "../protocol/memo.ts";
import { issueMemo, memoMac, openMemo, sealMemo } from "./memo.ts";

const secret = new Uint8Array(32).fill(5);
const payload: MemoPayload = {
  m: "GET",
  p: "/api/reports/1",
  a: "500000",
  t: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  n: "eip155:31337",
  k: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
  e: 1_763_800_300,
  r: "AAAAAAAAAAAAAAAA",
};

/** The same memo with one part replaced. */
const withPart = (memo: string, index: 0 | 1, part: (text: string) => string) => {
  const parts = memo.split(".") as [string, string];
  parts[index] = part(parts[index]);
  return parts.join(".");
};

describe("openMemo", () => {
  it("opens what the gate sealed, for any issued memo", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 12, maxLength: 12 }), (random) => {
        const { r: _r, ...terms } = payload;
        const memo = issueMemo(secret, terms, () => random);
        const opened = openMemo(secret, memo);
        expect(opened.ok).toBe(true);
        if (opened.ok) expect(opened.payload).toMatchObject({ m: "GET", a: "500000" });
      }),
      { numRuns: 200 },
    );
  });

  it("refuses a memo sealed with another secret or with an altered payload", () => {
    expect(openMemo(randomBytes(32), sealMemo(secret, payload))).toEqual({
      ok: false,
      reason: "memo was not issued by this gate",
    });
    const cheaper = sealMemo(secret, { ...payload, a: "1" });
    const original = sealMemo(secret, payload);
    const spliced = `${cheaper.split(".")[0]}.${original.split(".")[1]}`;
    expect(openMemo(secret, spliced).ok).toBe(false);
  });

  it("refuses every second spelling of a memo's bytes, so one payment has one memo text", () => {
    const memo = sealMemo(secret, payload);
    const [first, tag] = memo.split(".") as [string, string];
    // A 32-byte tag is 43 characters whose last one carries 2 unused bits: flipping them keeps the bytes.
    const last = tag.at(-1)!;
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const sameBytes = alphabet[alphabet.indexOf(last) ^ 1]!;
    expect(Buffer.from(`${tag.slice(0, -1)}${sameBytes}`, "base64url")).toEqual(
      Buffer.from(tag, "base64url"),
    );
    const refusals = [
      `${first}.${tag.slice(0, -1)}${sameBytes}`,
      withPart(memo, 1, (t) => `${t}=`),
      withPart(memo, 0, (t) => `${t}==`),
      withPart(memo, 0, (t) => t.replaceAll("-", "+").replaceAll("_", "/")),
      withPart(memo, 0, (t) => `${t.slice(0, 8)} ${t.slice(8)}`),
      withPart(memo, 0, (t) => t.padEnd(t.length + ((5 - (t.length % 4)) % 4), "A")),
      withPart(memo, 1, (t) => t.slice(0, -1)),
      `${memo}.x`,
      `.${tag}`,
    ];
    for (const forged of refusals) {
      if (forged === memo) continue;
      expect(openMemo(secret, forged).ok, forged).toBe(false);
    }
    expect(openMemo(secret, memo).ok).toBe(true);
  });

  it("never throws, whatever the text", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 400 }), (text) => {
        expect(openMemo(secret, text).ok).toBe(false);
      }),
      { numRuns: 2_000 },
    );
  });
});

describe("openMemo's fast payload reader", () => {
  const value = fc.oneof(
    fc.string(),
    fc.integer(),
    fc.constant(null),
    fc.constantFrom(
      "get",
      "GET",
      "/a b",
      "/x",
      "eip155:0",
      "0x5fbdb2315678afecb367f032d93f642f64180aa3",
      "0x5fbdb2315678afecb367f032d93f642f64180aa",
      "01",
      "1".repeat(16),
      "A".repeat(22),
      "A".repeat(16),
      0,
      -1,
      1.5,
      2 ** 53,
    ),
  );

  it("accepts a sealed payload exactly when MemoPayloadSchema does, reading it to the same value", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("m", "p", "q", "a", "t", "n", "k", "e", "r", "extra", "__proto__"),
        fc.option(value, { nil: undefined }),
        (field, replacement) => {
          const mutated: Record<string, unknown> = { ...payload };
          if (replacement === undefined) delete mutated[field];
          else mutated[field] = replacement;
          const json = Buffer.from(JSON.stringify(mutated), "utf8");
          const memo = `${json.toString("base64url")}.${createHmac("sha256", secret).update(json).digest("base64url")}`;
          const schema = MemoPayloadSchema.safeParse(JSON.parse(json.toString("utf8")));
          const opened = openMemo(secret, memo);
          expect(opened.ok ? opened.payload : undefined).toEqual(schema.success ? schema.data : undefined);
        },
      ),
      { numRuns: 1_000 },
    );
  });

  it("checks the MAC with the secret's current bytes when a caller rewrote them in place", () => {
    const mutable = Uint8Array.from(randomBytes(32));
    const memo = sealMemo(mutable, payload);
    expect(openMemo(mutable, memo).ok).toBe(true);
    mutable[0] = (mutable[0]! + 1) % 256;
    expect(openMemo(mutable, memo)).toEqual({ ok: false, reason: "memo was not issued by this gate" });
  });

  it("computes HMAC-SHA256 as createHmac does, for any secret and message length, call after call", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 32, maxLength: 200 }),
        fc.array(fc.uint8Array({ maxLength: 1_500 }), { minLength: 1, maxLength: 4 }),
        (secret, messages) => {
          for (const message of messages) {
            const expected = createHmac("sha256", secret).update(message).digest();
            expect(Buffer.from(memoMac(secret, message)).equals(expected)).toBe(true);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
