import { createHmac } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { TollgateError } from "./errors.ts";
import {
  formatWebhookSignature,
  parseWebhookSignature,
  WebhookEventSchema,
  webhookSigningInput,
} from "./webhook.ts";

describe("webhook signatures", () => {
  it("round-trips the Tollgate-Signature header of a delivery", () => {
    const body = JSON.stringify({
      id: "evt_1",
      type: "payment.settled",
      created: 1763800000,
      data: { amount: "500000" },
    });
    const mac = createHmac("sha256", "whsec")
      .update(webhookSigningInput(1763800000, body), "utf8")
      .digest("hex");
    const header = formatWebhookSignature(1763800000, mac);
    expect(header).toBe(`t=1763800000,v1=${mac}`);
    expect(parseWebhookSignature(header)).toEqual({ timestamp: 1763800000, v1: [mac] });
    expect(WebhookEventSchema.parse(JSON.parse(body)).type).toBe("payment.settled");
  });

  it("lists every v1 MAC during a secret rotation and ignores unknown schemes", () => {
    const a = "a".repeat(64);
    const b = "B".repeat(64);
    expect(parseWebhookSignature(`t=5, v1=${a}, v0=xyz, v1=${b}`)).toEqual({
      timestamp: 5,
      v1: [a, "b".repeat(64)],
    });
  });

  it.each([
    "",
    "t=5",
    `v1=${"a".repeat(64)}`,
    `t=x,v1=${"a".repeat(64)}`,
    `t=5,v1=abc`,
    `t=5,t=6,v1=${"a".repeat(64)}`,
    "garbage",
  ])("refuses %j with InvalidSignature", (header) => {
    expect(() => parseWebhookSignature(header)).toThrow(
      expect.objectContaining({ code: "InvalidSignature" }),
    );
  });

  it("answers garbage with InvalidSignature, never another exception", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: fc.constantFrom(..."tv1=,a0 ") })), (header) => {
        try {
          parseWebhookSignature(header);
        } catch (error) {
          expect(error).toBeInstanceOf(TollgateError);
          expect((error as TollgateError).code).toBe("InvalidSignature");
        }
      }),
      { numRuns: 1500 },
    );
  });

  it("refuses events of unknown types", () => {
    expect(
      WebhookEventSchema.safeParse({ id: "e", type: "payment.refunded", created: 1, data: {} }).success,
    ).toBe(false);
  });
});
