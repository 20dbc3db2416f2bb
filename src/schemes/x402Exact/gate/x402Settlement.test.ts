import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from "@x402/core/http";
import fc from "fast-check";
import { Hono } from "hono";
import type { Address } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { composePaymentRequired } from "../../../gate/composePaymentRequired.ts";
import type { GateRequest } from "../../../gate/gateRequest.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../../gate/honoPaymentGate.ts";
import { type GatePayment, paymentGate } from "../../../gate/paymentGate.ts";
import type { PaymentGateOptions } from "../../../gate/paymentGateOptions.ts";
import type { FacilitatorClient } from "../../../http/facilitatorClient.ts";
import { base64Encode } from "../../../protocol/base64.ts";
import { createFixedClock, unixSeconds } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { decodeJsonHeader, encodeJsonHeader } from "../../../protocol/header.ts";
import { PaymentRequiredSchema } from "../../../protocol/paymentRequired.ts";
import {
  type X402PaymentPayload,
  type X402PaymentRequired,
  X402PaymentRequiredSchema,
  type X402SettleRequest,
  type X402SettleResponse,
  type X402VerifyResponse,
} from "../../../protocol/x402.ts";
import { createMemoryReplayGuard } from "../../../store/createMemoryReplayGuard.ts";
import type { ReplayGuard } from "../../../store/replayGuard.ts";
import { createX402Payment } from "../client/payX402.ts";
import {
  MIN_SETTLE_HEADROOM_SECONDS,
  RETRY_GRACE_SECONDS,
  type X402GatePayment,
  x402GateId,
  x402Requirements,
} from "./x402Settlement.ts";

const NETWORK = "eip155:31337" as const;
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3" as Address;
const OTHER_TOKEN = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512" as Address;
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Address;
const OTHER_PAY_TO = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC" as Address;
const TX = `0x${"ab".repeat(32)}`;
const SECRET = "a-test-memo-secret-that-is-at-least-32-bytes-long";
/** This gate's identity in the requirements it settles with. */
const GATE_ID = x402GateId(new Uint8Array(Buffer.from(SECRET, "utf8")));
const START_MS = 1_763_800_000_000;
const payerAccount = privateKeyToAccount(
  "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
);

type SettleHandler = (request: X402SettleRequest) => Promise<X402SettleResponse> | X402SettleResponse;
type VerifyHandler = (request: X402SettleRequest) => Promise<X402VerifyResponse> | X402VerifyResponse;

/** What the facilitator answers a payment it would settle. */
const valid: VerifyHandler = (request) => ({
  isValid: true,
  payer: (request.paymentPayload.payload.authorization as { from: string }).from,
});

/**
 * A facilitator client that answers `/x402/verify` and `/x402/settle` from its handlers (parsed with
 * the real reply schemas) and records every request; nothing else may be called.
 */
function fakeFacilitator(initial: SettleHandler) {
  const settles: X402SettleRequest[] = [];
  const verifies: X402SettleRequest[] = [];
  /** Every call in order: "verify" or "settle". */
  const calls: string[] = [];
  let handler = initial;
  let verifier: VerifyHandler = valid;
  const refuse = async (): Promise<never> => {
    throw new Error("the gate must not call this for an x402 payment");
  };
  const client: FacilitatorClient = {
    url: "http://facilitator.test",
    authorize: refuse,
    verify: refuse,
    jwks: refuse,
    async supported() {
      throw new TollgateError("ChainUnavailable", "facilitator is unreachable");
    },
    async request(method, path, schema, options) {
      expect(["POST /x402/verify", "POST /x402/settle"]).toContain(`${method} ${path}`);
      const body = options?.body as X402SettleRequest;
      if (path === "/x402/verify") {
        verifies.push(body);
        calls.push("verify");
        return schema.parse(await verifier(body));
      }
      settles.push(body);
      calls.push("settle");
      return schema.parse(await handler(body));
    },
  };
  return {
    client,
    settles,
    verifies,
    calls,
    answer(next: SettleHandler) {
      handler = next;
    },
    verifyWith(next: VerifyHandler) {
      verifier = next;
    },
  };
}

/** What an idempotent facilitator answers: success with the same transaction for the same payload. */
const settled: SettleHandler = (request) => ({
  success: true,
  transaction: TX,
  network: request.paymentRequirements.network,
  payer: (request.paymentPayload.payload.authorization as { from: string }).from,
});

function setup(
  options: {
    handler?: SettleHandler;
    replayGuard?: ReplayGuard;
    overrides?: Partial<PaymentGateOptions>;
  } = {},
) {
  const clock = createFixedClock(START_MS);
  const facilitator = fakeFacilitator(options.handler ?? settled);
  const makeGate = () =>
    paymentGate({
      payTo: PAY_TO,
      network: NETWORK,
      token: { address: TOKEN, name: "USD Coin", version: "2" },
      facilitator: facilitator.client,
      memoSecret: SECRET,
      clock,
      replayGuard: options.replayGuard ?? createMemoryReplayGuard({ clock }),
      routes: {
        "GET /api/reports/:id": { price: "0.50", description: "one report" },
        "GET /api/choice": {
          pricing: [
            { type: "one-time", price: "0.02" },
            { type: "one-time", price: "0.05" },
          ],
        },
      },
      ...options.overrides,
    });
  const served: (GatePayment | undefined)[] = [];
  /** What the handler answers after recording the payment: 200 unless a test says otherwise. */
  const handlerStatus = { value: 200 };
  const appOf = (gate: ReturnType<typeof paymentGate>) => {
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.all("/api/*", (c) => {
      const payment = c.get("payment");
      // What the handler sees: a payment still to settle carries no transaction yet.
      served.push(payment === undefined ? undefined : { ...payment });
      return c.json({ resource: c.req.path }, handlerStatus.value as 200);
    });
    return app;
  };
  const app = appOf(makeGate());
  return { clock, facilitator, app, served, handlerStatus, appOf, makeGate };
}

type Kit = ReturnType<typeof setup>;

async function offered(kit: Kit, path = "/api/reports/1"): Promise<X402PaymentRequired> {
  const response = await kit.app.request(path);
  expect(response.status).toBe(402);
  return decodeJsonHeader(response.headers.get("PAYMENT-REQUIRED") ?? "", X402PaymentRequiredSchema);
}

/** A standard x402 payment for the gate's own offer, signed by the payer's key. */
async function paymentFor(kit: Kit, path = "/api/reports/1", required?: X402PaymentRequired) {
  const payment = await createX402Payment(
    { network: NETWORK, account: payerAccount },
    required ?? (await offered(kit, path)),
    { maxPrice: "1", clock: kit.clock, allowedAssets: [TOKEN, OTHER_TOKEN] },
  );
  return payment.header.value;
}

/** A payload the client altered after signing (or signed for terms it made up). */
function tampered(header: string, change: (payload: X402PaymentPayload) => X402PaymentPayload): string {
  return encodeJsonHeader(change(decodeHeaderJson(header) as X402PaymentPayload));
}

function send(kit: Kit, header: string, path = "/api/reports/1", app = kit.app) {
  return app.request(path, { headers: { "PAYMENT-SIGNATURE": header } });
}

async function expectRefused(response: Response, reason: string) {
  expect(response.status).toBe(402);
  const body = PaymentRequiredSchema.parse(await response.json());
  expect(body.error).toBe("InvalidPaymentProof");
  expect(body.message).toMatch(/^x402 (payment|settlement) refused: /);
  expect(body.accepts.length).toBeGreaterThan(0);
  const fresh = decodePaymentRequiredHeader(response.headers.get("PAYMENT-REQUIRED") ?? "");
  expect(fresh.error).toBe(reason);
  expect(fresh.accepts.length).toBeGreaterThan(0);
  expect(response.headers.get("PAYMENT-RESPONSE")).toBeNull();
}

describe("paymentGate: x402 PAYMENT-SIGNATURE", () => {
  it("verifies with the gate's own requirements, runs the handler, then settles and serves with PAYMENT-RESPONSE", async () => {
    const kit = setup();
    const required = await offered(kit);
    const header = await paymentFor(kit, "/api/reports/1", required);
    expect(kit.facilitator.settles).toHaveLength(0);

    const response = await send(kit, header);
    expect(response.status).toBe(200);
    expect(await response.clone().json()).toEqual({ resource: "/api/reports/1" });
    expect(kit.facilitator.calls).toEqual(["verify", "settle"]);
    // The same request body both times, so that the facilitator ties the two to one request.
    expect(kit.facilitator.verifies).toEqual(kit.facilitator.settles);
    expect(decodePaymentResponseHeader(response.headers.get("PAYMENT-RESPONSE") ?? "")).toEqual({
      success: true,
      transaction: TX,
      network: NETWORK,
      payer: payerAccount.address,
    });
    expect(kit.facilitator.settles).toHaveLength(1);
    const [settle] = kit.facilitator.settles;
    expect(settle?.x402Version).toBe(2);
    // The offer the client accepted, naming this gate, so its settlement is answered to no other gate.
    expect(settle?.paymentRequirements).toEqual({
      ...required.accepts[0],
      extra: { ...required.accepts[0]?.extra, tollgateGate: GATE_ID },
    });
    expect(settle?.paymentPayload).toEqual(decodeHeaderJson(header));

    expect(kit.served).toHaveLength(1);
    const paid = kit.served[0];
    expect(paid).toMatchObject({
      scheme: "exact",
      payer: payerAccount.address,
      amount: 500_000n,
      payTo: PAY_TO,
      network: NETWORK,
      token: TOKEN,
    });
    // The handler ran before the settlement: it saw no transaction.
    expect((paid as X402GatePayment | undefined)?.transaction).toBeUndefined();
    expect(paid !== undefined && "x402" in paid && paid.x402.nonce).toMatch(/^0x[0-9a-f]{64}$/);
  });

  it("settles nothing when the handler answers 4xx or 5xx, says so, and serves the same header later", async () => {
    const kit = setup();
    const header = await paymentFor(kit);
    for (const status of [500, 404]) {
      kit.handlerStatus.value = status;
      const failed = await send(kit, header);
      expect(failed.status).toBe(status);
      expect(decodePaymentResponseHeader(failed.headers.get("PAYMENT-RESPONSE") ?? "")).toMatchObject({
        success: false,
        errorReason: "handler_failed",
        transaction: "",
      });
    }
    expect(kit.facilitator.settles).toHaveLength(0);
    kit.handlerStatus.value = 200;
    const paid = await send(kit, header);
    expect(paid.status).toBe(200);
    expect(decodePaymentResponseHeader(paid.headers.get("PAYMENT-RESPONSE") ?? "").success).toBe(true);
    expect(kit.facilitator.settles).toHaveLength(1);
    await expectRefused(await send(kit, header), "invalid_exact_evm_nonce_already_used");
  });

  it("serves the same header again after the lease when its gate died between the handler and the settlement", async () => {
    const kit = setup();
    const gate = kit.makeGate();
    const header = await paymentFor(kit);
    const request: GateRequest = {
      method: "GET",
      url: "/api/reports/1",
      headers: new Headers({ "PAYMENT-SIGNATURE": header }),
    };
    // The gate verified the payment and the handler ran; the process died before `complete`.
    const died = await gate(request);
    expect(died.kind === "pass" && died.settleAfterHandler).toBe(true);
    expect(kit.facilitator.settles).toHaveLength(0);

    const early = await send(kit, header, "/api/reports/1", kit.appOf(gate));
    expect(early.status).toBe(503);
    expect(await early.json()).toMatchObject({ error: { code: "PaymentInFlight" } });
    kit.clock.advance(61_000);
    const served = await send(kit, header, "/api/reports/1", kit.appOf(gate));
    expect(served.status).toBe(200);
    expect(kit.facilitator.settles).toHaveLength(1);
    await expectRefused(
      await send(kit, header, "/api/reports/1", kit.appOf(gate)),
      "invalid_exact_evm_nonce_already_used",
    );
  });

  it("refuses a payment that leaves too little time to run the handler and settle, settling nothing", async () => {
    const kit = setup();
    const header = await paymentFor(kit);
    kit.clock.advance((300 - MIN_SETTLE_HEADROOM_SECONDS + 1) * 1000);
    await expectRefused(await send(kit, header), "invalid_exact_evm_payload_authorization_valid_before");
    expect(kit.served).toHaveLength(0);
    expect(kit.facilitator.settles).toHaveLength(0);
  });

  it("serves one payload once: a replay is refused with nonce_already_used", async () => {
    const kit = setup();
    const header = await paymentFor(kit);
    expect((await send(kit, header)).status).toBe(200);
    await expectRefused(await send(kit, header), "invalid_exact_evm_nonce_already_used");
    expect(kit.served).toHaveLength(1);
  });

  it("serves concurrent copies once, settling once: the others are told the payment is in flight", async () => {
    let release: () => void = () => {};
    const gateOpen = new Promise<void>((resolve) => {
      release = resolve;
    });
    const kit = setup({
      handler: async (request) => {
        await gateOpen;
        return settled(request);
      },
    });
    const header = await paymentFor(kit);
    const responses = Array.from({ length: 5 }, () => send(kit, header));
    release();
    const answered = await Promise.all(responses);
    const statuses = answered.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 503, 503, 503, 503]);
    const held = answered.find((r) => r.status === 503);
    expect(await held?.json()).toMatchObject({ error: { code: "PaymentInFlight" } });
    expect(held?.headers.get("Retry-After")).not.toBeNull();
    expect(kit.facilitator.settles).toHaveLength(1);
    expect(kit.served).toHaveLength(1);
  });

  it("serves a payload once across two gate instances sharing a replay guard", async () => {
    const clock = createFixedClock(START_MS);
    const kit = setup({ replayGuard: createMemoryReplayGuard({ clock }) });
    const second = kit.appOf(kit.makeGate());
    const header = await paymentFor(kit);
    const [a, b] = await Promise.all([send(kit, header), send(kit, header, "/api/reports/1", second)]);
    expect([a.status, b.status].sort()).toEqual([200, 503]);
    // One instance consumed the key before asking the facilitator; the other was refused without asking.
    expect(kit.facilitator.settles).toHaveLength(1);
    expect(kit.served).toHaveLength(1);
  });

  it("names the gate in the requirements it settles with: alike for instances sharing a memo secret, not for another gate", async () => {
    const kit = setup();
    const sameApi = kit.appOf(kit.makeGate());
    const otherSecret = "another-gate-memo-secret-at-least-32-bytes-long";
    const otherGate = kit.appOf(
      paymentGate({
        payTo: PAY_TO,
        network: NETWORK,
        token: { address: TOKEN, name: "USD Coin", version: "2" },
        facilitator: kit.facilitator.client,
        memoSecret: otherSecret,
        clock: kit.clock,
        routes: { "GET /api/reports/:id": { price: "0.50" } },
      }),
    );
    for (const app of [kit.app, sameApi, otherGate]) {
      expect((await send(kit, await paymentFor(kit), "/api/reports/1", app)).status).toBe(200);
    }
    const named = kit.facilitator.settles.map((settle) => settle.paymentRequirements.extra?.tollgateGate);
    expect(named).toEqual([GATE_ID, GATE_ID, x402GateId(new Uint8Array(Buffer.from(otherSecret, "utf8")))]);
    expect(named[2]).not.toBe(GATE_ID);
    expect(GATE_ID).toMatch(/^[0-9a-f]{32}$/);
  });

  it("answers 503 without the handler's answer when the settlement fails, and serves the same header once it is back", async () => {
    const kit = setup({
      handler: () => {
        throw new TollgateError("ChainUnavailable", "facilitator is unreachable", {
          details: { reason: "facilitator_unreachable" },
        });
      },
    });
    const header = await paymentFor(kit);
    const down = await send(kit, header);
    expect(down.status).toBe(503);
    expect(down.headers.get("Retry-After")).toBe("5");
    expect(await down.json()).toMatchObject({ error: { code: "ChainUnavailable" } });
    expect(down.headers.get("PAYMENT-RESPONSE")).toBeNull();
    expect(kit.served).toHaveLength(1);

    kit.facilitator.answer(settled);
    expect((await send(kit, header)).status).toBe(200);
    await expectRefused(await send(kit, header), "invalid_exact_evm_nonce_already_used");
    expect(kit.served).toHaveLength(2);
  });

  it("answers 503 before the handler when the payment cannot be verified, and serves the same header later", async () => {
    const kit = setup();
    kit.facilitator.verifyWith(() => {
      throw new TollgateError("ChainUnavailable", "facilitator is unreachable");
    });
    const header = await paymentFor(kit);
    expect((await send(kit, header)).status).toBe(503);
    expect(kit.served).toHaveLength(0);
    kit.facilitator.verifyWith(valid);
    expect((await send(kit, header)).status).toBe(200);
    expect(kit.served).toHaveLength(1);
  });

  it("treats settlement_pending as a fault to retry, not a refusal that would invite a second payment", async () => {
    const kit = setup({
      handler: (request) => ({
        success: false,
        errorReason: "settlement_pending",
        errorMessage: "still settling",
        transaction: TX,
        network: request.paymentRequirements.network,
      }),
    });
    const header = await paymentFor(kit);
    const pending = await send(kit, header);
    expect(pending.status).toBe(503);
    expect(pending.headers.get("Retry-After")).toBe("5");
    kit.facilitator.answer(settled);
    expect((await send(kit, header)).status).toBe(200);
    expect(kit.served).toHaveLength(2);
  });

  it("serves a settled payment after its validity window, within the retry grace, and refuses it after", async () => {
    const kit = setup({
      handler: () => {
        throw new TollgateError("ChainUnavailable", "facilitator is unreachable");
      },
    });
    const header = await paymentFor(kit);
    expect((await send(kit, header)).status).toBe(503);
    // The facilitator settled it in the meantime and answers idempotently; the authorization expired,
    // so a verify refuses it and the gate asks the settle endpoint, which names the transaction.
    kit.facilitator.answer(settled);
    kit.facilitator.verifyWith(() => ({
      isValid: false,
      invalidReason: "invalid_exact_evm_payload_authorization_valid_before",
    }));
    kit.clock.advance((300 + RETRY_GRACE_SECONDS - 5) * 1000);
    const retried = await send(kit, header);
    expect(retried.status).toBe(200);
    expect(decodePaymentResponseHeader(retried.headers.get("PAYMENT-RESPONSE") ?? "").transaction).toBe(TX);
    expect((kit.served.at(-1) as X402GatePayment | undefined)?.transaction).toBe(TX);

    // Once the grace is over too, the gate refuses before asking anyone (its guard may forget the key).
    const other = setup();
    const late = await paymentFor(other);
    other.clock.advance((300 + RETRY_GRACE_SECONDS) * 1000);
    await expectRefused(await send(other, late), "invalid_exact_evm_payload_authorization_valid_before");
    expect(other.facilitator.settles).toHaveLength(0);
  });

  it("passes a verify refusal on as a fresh 402 with its reason, before the handler, consuming nothing", async () => {
    const kit = setup();
    kit.facilitator.verifyWith(() => ({
      isValid: false,
      invalidReason: "invalid_exact_evm_insufficient_balance",
      invalidMessage: "balance 1 is below 500000",
    }));
    const header = await paymentFor(kit);
    const refused = await send(kit, header);
    await expectRefused(refused.clone(), "invalid_exact_evm_insufficient_balance");
    expect(PaymentRequiredSchema.parse(await refused.json()).message).toMatch(/balance 1 is below 500000/);
    expect(kit.served).toHaveLength(0);
    expect(kit.facilitator.settles).toHaveLength(0);
    kit.facilitator.verifyWith(valid);
    expect((await send(kit, header)).status).toBe(200);
    expect(kit.served).toHaveLength(1);
  });

  it("answers a settlement refused after the handler ran with a fresh 402 instead of its answer, consuming nothing", async () => {
    const kit = setup({
      handler: (request) => ({
        success: false,
        errorReason: "invalid_exact_evm_insufficient_balance",
        errorMessage: "balance 1 is below 500000",
        transaction: "",
        network: request.paymentRequirements.network,
      }),
    });
    const header = await paymentFor(kit);
    const refused = await send(kit, header);
    await expectRefused(refused.clone(), "invalid_exact_evm_insufficient_balance");
    expect(PaymentRequiredSchema.parse(await refused.json()).message).toMatch(/balance 1 is below 500000/);
    expect(kit.served).toHaveLength(1);
    // Funded later, the same authorization is still good: nothing was consumed.
    kit.facilitator.answer(settled);
    expect((await send(kit, header)).status).toBe(200);
    expect(kit.served).toHaveLength(2);
  });

  it("refuses terms the route does not offer without asking the facilitator", async () => {
    const kit = setup();
    const required = await offered(kit);
    const base = required.accepts[0]!;
    const cheaper = await paymentFor(kit, "/api/reports/1", {
      ...required,
      accepts: [{ ...base, amount: "1" }],
    });
    await expectRefused(await send(kit, cheaper), "invalid_payment_requirements");
    for (const accepted of [
      { ...base, payTo: OTHER_PAY_TO },
      { ...base, asset: OTHER_TOKEN },
      { ...base, network: "eip155:8453" },
    ]) {
      const header = tampered(await paymentFor(kit), (p) => ({ ...p, accepted }));
      await expectRefused(await send(kit, header), "invalid_payment_requirements");
    }
    const upto = tampered(await paymentFor(kit), (p) => ({ ...p, accepted: { ...base, scheme: "upto" } }));
    await expectRefused(await send(kit, upto), "unsupported_scheme");
    // Another route's price is not this route's price.
    const elsewhere = await paymentFor(kit, "/api/choice");
    await expectRefused(await send(kit, elsewhere), "invalid_payment_requirements");
    expect(kit.facilitator.calls).toHaveLength(0);
    expect(kit.served).toHaveLength(0);
  });

  it("accepts any of a route's one-time options", async () => {
    const kit = setup();
    const required = await offered(kit, "/api/choice");
    expect(required.accepts.map((a) => a.amount)).toEqual(["20000", "50000"]);
    const dearer = await paymentFor(kit, "/api/choice", { ...required, accepts: [required.accepts[1]!] });
    expect((await send(kit, dearer, "/api/choice")).status).toBe(200);
    expect(kit.served[0]?.amount).toBe(50_000n);
  });

  it("refuses an authorization that pays another address or amount than its accepted terms", async () => {
    const kit = setup();
    const header = await paymentFor(kit);
    const change = (field: string, value: string) =>
      tampered(header, (p) => {
        const payload = p.payload as { authorization: Record<string, string> };
        return { ...p, payload: { ...payload, authorization: { ...payload.authorization, [field]: value } } };
      });
    await expectRefused(await send(kit, change("to", OTHER_PAY_TO)), "invalid_exact_evm_recipient_mismatch");
    await expectRefused(
      await send(kit, change("value", "1")),
      "invalid_exact_evm_payload_authorization_value_mismatch",
    );
    const farFuture = String(unixSeconds(kit.clock) + 86_400);
    await expectRefused(
      await send(kit, change("validBefore", farFuture)),
      "invalid_exact_evm_payload_authorization_valid_before",
    );
    expect(kit.facilitator.settles).toHaveLength(0);
  });

  it("answers malformed, oversized and other-version headers with a 402, never a 500", async () => {
    const kit = setup();
    const cases: [string, string][] = [
      ["not base64!", "invalid_payload"],
      ["e30=", "invalid_payload"],
      [base64Encode("[1,2]"), "invalid_payload"],
      [base64Encode("x".repeat(9000)), "invalid_payload"],
      [encodeJsonHeader({ x402Version: 1, scheme: "exact", payload: {} }), "invalid_x402_version"],
      [
        tampered(await paymentFor(kit), (p) => ({
          ...p,
          payload: { permit2Authorization: {}, signature: "0x" },
        })),
        "unsupported_payload_type",
      ],
      [tampered(await paymentFor(kit), (p) => ({ ...p, payload: { signature: "0x00" } })), "invalid_payload"],
    ];
    for (const [header, reason] of cases) await expectRefused(await send(kit, header), reason);
    expect(kit.facilitator.settles).toHaveLength(0);
    expect(kit.served).toHaveLength(0);
  });

  it("answers 503 without settling when the token's EIP-712 domain is unknown", async () => {
    const kit = setup({ overrides: { token: TOKEN } });
    const header = await paymentFor(kit, "/api/reports/1", {
      x402Version: 2,
      resource: { url: "http://localhost/api/reports/1" },
      accepts: [
        {
          scheme: "exact",
          network: NETWORK,
          amount: "500000",
          asset: TOKEN,
          payTo: PAY_TO,
          maxTimeoutSeconds: 300,
          extra: { name: "USD Coin", version: "2" },
        },
      ],
    });
    const response = await send(kit, header);
    expect(response.status).toBe(503);
    expect(kit.facilitator.settles).toHaveLength(0);
  });

  it("answers a fault without settling, consuming nothing, when the replay guard fails", async () => {
    let failing = true;
    const clock = createFixedClock(START_MS);
    const memory = createMemoryReplayGuard({ clock });
    const guard: ReplayGuard = {
      consume: async (key, expiresAtMs) => {
        if (failing) throw new Error("database is down");
        return memory.consume(key, expiresAtMs);
      },
      release: (key) => memory.release(key),
    };
    const kit = setup({ replayGuard: guard });
    const header = await paymentFor(kit);
    const response = await send(kit, header);
    expect(response.status).toBe(500);
    expect(JSON.stringify(await response.json())).not.toMatch(/database/);
    expect(kit.facilitator.settles).toHaveLength(0);
    failing = false;
    expect((await send(kit, header)).status).toBe(200);
    expect(kit.served).toHaveLength(1);
  });

  it("does not trust a facilitator reply for another network", async () => {
    const kit = setup({ handler: (request) => ({ ...settled(request), network: "eip155:8453" }) });
    const response = await send(kit, await paymentFor(kit));
    expect(response.status).toBe(500);
    expect(await response.text()).not.toMatch(/resource/);
  });

  it("leaves a free path alone whatever PAYMENT-SIGNATURE it carries", async () => {
    const kit = setup();
    const response = await send(kit, "garbage", "/api/free");
    expect(response.status).toBe(200);
    expect(kit.served).toEqual([undefined]);
    expect(kit.facilitator.settles).toHaveLength(0);
  });
});

describe("paymentGate: x402 fuzzing", () => {
  it("answers 2,000 random and mutated PAYMENT-SIGNATURE values with 402, settling only the genuine terms", async () => {
    const kit = setup();
    const gate = kit.makeGate();
    const genuine = decodeHeaderJson(await paymentFor(kit)) as Record<string, unknown>;
    const fields = ["x402Version", "accepted", "payload", "resource", "extensions"];
    const header = fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.base64String({ maxLength: 400 }),
      fc.jsonValue({ maxDepth: 3 }).map((value) => base64Encode(JSON.stringify(value))),
      fc
        .tuple(fc.constantFrom(...fields), fc.jsonValue({ maxDepth: 2 }))
        .map(([field, value]) => base64Encode(JSON.stringify({ ...genuine, [field]: value }))),
      fc
        .tuple(
          fc.constantFrom("from", "to", "value", "validAfter", "validBefore", "nonce"),
          fc.jsonValue({ maxDepth: 1 }),
        )
        .map(([field, value]) => {
          const payload = genuine.payload as { authorization: Record<string, unknown> };
          const authorization = { ...payload.authorization, [field]: value };
          return base64Encode(JSON.stringify({ ...genuine, payload: { ...payload, authorization } }));
        }),
    );
    // The facilitator refuses every payload here; a pass would mean the gate served without payment.
    kit.facilitator.verifyWith(() => ({ isValid: false, invalidReason: "invalid_exact_evm_signature" }));
    await fc.assert(
      fc.asyncProperty(header, async (value) => {
        const request: GateRequest = {
          method: "GET",
          url: "http://localhost/api/reports/1",
          headers: { get: (name) => (name.toLowerCase() === "payment-signature" ? value : null) },
        };
        const result = await gate(request);
        expect(result.kind).toBe("respond");
        if (result.kind === "respond") expect(result.response.status).toBe(402);
      }),
      { numRuns: 2_000, seed: 402 },
    );
    // Mutations that keep the terms reach the facilitator, always with the gate's own requirements.
    expect(kit.facilitator.settles).toHaveLength(0);
    expect(kit.facilitator.verifies.length).toBeGreaterThan(0);
    for (const settle of kit.facilitator.verifies) {
      expect(settle.paymentRequirements).toEqual({
        scheme: "exact",
        network: NETWORK,
        amount: "500000",
        asset: TOKEN,
        payTo: PAY_TO,
        maxTimeoutSeconds: 300,
        extra: { name: "USD Coin", version: "2", tollgateGate: GATE_ID },
      });
    }
  });
});

describe("x402Requirements", () => {
  it("equals the accepts of the PAYMENT-REQUIRED header the gate builds", () => {
    const clock = createFixedClock(START_MS);
    const offers = [
      { scheme: "exact" as const, amount: 20_000n },
      { scheme: "exact" as const, amount: 50_000n },
    ];
    const built = composePaymentRequired({
      error: "PaymentRequired",
      message: "pay",
      method: "GET",
      path: "/x",
      resourceUrl: "http://api.test/x",
      offers,
      payTo: PAY_TO,
      network: NETWORK,
      token: TOKEN,
      tokenEip712: { name: "USD Coin", version: "2" },
      facilitator: "http://facilitator.test",
      memoSecret: new Uint8Array(32).fill(1),
      memoTtlSeconds: 300,
      clock,
      random: (n) => new Uint8Array(n),
    });
    expect(
      x402Requirements({
        offers,
        payTo: PAY_TO,
        network: NETWORK,
        token: TOKEN,
        tokenEip712: { name: "USD Coin", version: "2" },
        maxTimeoutSeconds: 300,
      }),
    ).toEqual(built.x402?.accepts);
  });
});

/** The JSON inside a base64 header, decoded as x402's own decoder would. */
function decodeHeaderJson(header: string): unknown {
  return JSON.parse(Buffer.from(header, "base64").toString("utf8"));
}
