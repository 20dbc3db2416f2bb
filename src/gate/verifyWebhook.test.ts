import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createFixedClock } from "../protocol/clock.ts";
import { isTollgateError } from "../protocol/errors.ts";
import { verifyWebhook, WebhookVerificationError } from "./verifyWebhook.ts";

const T = 1_763_800_000;
const clock = createFixedClock(T * 1000);
const secret = "whsec_current";
const body = JSON.stringify({
  id: "evt_42",
  type: "payment.settled",
  created: T - 3,
  data: { payTo: "0x00000000000000000000000000000000000000aa", amount: "500000" },
});

function mac(key: string, timestamp: number, text: string): string {
  return createHmac("sha256", key).update(`${timestamp}.${text}`, "utf8").digest("hex");
}

function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(WebhookVerificationError);
    expect(isTollgateError(error, "InvalidSignature")).toBe(true);
    return (error as WebhookVerificationError).reason;
  }
  throw new Error("expected verifyWebhook to throw");
}

describe("verifyWebhook", () => {
  it("returns the event of a correctly signed delivery", () => {
    const headers = new Headers({ "Tollgate-Signature": `t=${T},v1=${mac(secret, T, body)}` });
    const event = verifyWebhook(secret, headers, body, { clock });
    expect(event).toEqual(JSON.parse(body));
  });

  it("accepts the raw body as bytes and Node-style lower-case header records", () => {
    const headers = { "tollgate-signature": `t=${T},v1=${mac(secret, T, body)}` };
    const event = verifyWebhook(secret, headers, new TextEncoder().encode(body), { clock });
    expect(event.id).toBe("evt_42");
  });

  it("refuses a forged signature", () => {
    const forged = `t=${T},v1=${mac("whsec_attacker", T, body)}`;
    expect(refusal(() => verifyWebhook(secret, forged, body, { clock }))).toBe("signature_mismatch");
  });

  it("refuses a body changed after signing", () => {
    const header = `t=${T},v1=${mac(secret, T, body)}`;
    const tampered = body.replace("500000", "900000");
    expect(refusal(() => verifyWebhook(secret, header, tampered, { clock }))).toBe("signature_mismatch");
  });

  it("refuses a valid signature moved to another timestamp", () => {
    const header = `t=${T + 1},v1=${mac(secret, T, body)}`;
    expect(refusal(() => verifyWebhook(secret, header, body, { clock }))).toBe("signature_mismatch");
  });

  it("refuses a stale timestamp and one too far in the future, with the tolerance configurable", () => {
    const old = T - 301;
    const oldHeader = `t=${old},v1=${mac(secret, old, body)}`;
    expect(refusal(() => verifyWebhook(secret, oldHeader, body, { clock }))).toBe("stale_timestamp");
    const future = T + 301;
    const futureHeader = `t=${future},v1=${mac(secret, future, body)}`;
    expect(refusal(() => verifyWebhook(secret, futureHeader, body, { clock }))).toBe("stale_timestamp");
    // The edge of the window is inside it.
    const edge = T - 300;
    expect(verifyWebhook(secret, `t=${edge},v1=${mac(secret, edge, body)}`, body, { clock }).id).toBe(
      "evt_42",
    );
    expect(verifyWebhook(secret, oldHeader, body, { clock, toleranceSeconds: 600 }).id).toBe("evt_42");
  });

  it.each([
    ["absent", {}],
    ["empty", { "tollgate-signature": "" }],
    ["without v1", { "tollgate-signature": `t=${T}` }],
    ["without t", { "tollgate-signature": `v1=${"a".repeat(64)}` }],
    ["with a short v1", { "tollgate-signature": `t=${T},v1=abc` }],
    ["with a non-numeric t", { "tollgate-signature": `t=now,v1=${"a".repeat(64)}` }],
    ["repeated", { "tollgate-signature": [`t=${T},v1=${"a".repeat(64)}`, `t=${T},v1=${"b".repeat(64)}`] }],
  ])("refuses a malformed header (%s)", (_, headers) => {
    expect(refusal(() => verifyWebhook(secret, headers, body, { clock }))).toBe("malformed_header");
  });

  it("accepts a delivery signed with the new and the old secret while the receiver rotates", () => {
    const oldSecret = "whsec_old";
    const header = `t=${T},v1=${mac("whsec_new", T, body)},v1=${mac(oldSecret, T, body)}`;
    // A receiver still on the old secret, one already on the new, and one holding both all accept.
    expect(verifyWebhook(oldSecret, header, body, { clock }).id).toBe("evt_42");
    expect(verifyWebhook("whsec_new", header, body, { clock }).id).toBe("evt_42");
    // A receiver that lists both secrets accepts a delivery signed with only one of them.
    const onlyNew = `t=${T},v1=${mac("whsec_new", T, body)}`;
    expect(verifyWebhook([oldSecret, "whsec_new"], onlyNew, body, { clock }).id).toBe("evt_42");
    expect(refusal(() => verifyWebhook(["whsec_other"], header, body, { clock }))).toBe("signature_mismatch");
  });

  it("refuses a signed body that is not a Tollgate event", () => {
    const notEvent = JSON.stringify({ hello: "world" });
    const header = `t=${T},v1=${mac(secret, T, notEvent)}`;
    expect(refusal(() => verifyWebhook(secret, header, notEvent, { clock }))).toBe("malformed_body");
    const notJson = "not json";
    const header2 = `t=${T},v1=${mac(secret, T, notJson)}`;
    expect(refusal(() => verifyWebhook(secret, header2, notJson, { clock }))).toBe("malformed_body");
  });

  it("rejects a call with no secret as a programming error", () => {
    expect(() => verifyWebhook([], `t=${T},v1=${"a".repeat(64)}`, body, { clock })).toThrow(TypeError);
  });
});
