import { Hono } from "hono";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CheckablePayment } from "../../../facilitator/checkSignedPayment.ts";
import type { PaymentRow } from "../../../facilitator/paymentRecords.ts";
import { errorResponse } from "../../../http/httpErrors.ts";
import { createFixedClock } from "../../../protocol/clock.ts";
import { type ErrorCode, TollgateError } from "../../../protocol/errors.ts";
import type { SupportedResponse } from "../../../protocol/facilitator.ts";
import { createTestStore } from "../../../store/createTestStore.ts";
import type { Queryable, Store } from "../../../store/store.ts";
import { claimX402Request, findX402Request, x402RequestHash } from "./x402RequestRecords.ts";
import { type X402RoutesDeps, x402Routes, x402Supported } from "./x402Routes.ts";

const NOW = 1_763_800_000;
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const PAYER: `0x${string}` = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
const SIGNER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const NONCE: `0x${string}` = `0x${"ab".repeat(32)}`;
const SIGNATURE: `0x${string}` = `0x${"11".repeat(65)}`;
const TX: `0x${string}` = `0x${"cd".repeat(32)}`;

const supported: SupportedResponse = {
  version: "1",
  schemes: ["exact", "subscription"],
  networks: [
    {
      network: "eip155:31337",
      tokens: [{ address: TOKEN, symbol: "USDC", decimals: 6, eip712: { name: "USD Coin", version: "2" } }],
      signers: [SIGNER],
    },
  ],
};

type FakeEngine = X402RoutesDeps["engine"] & { settled: CheckablePayment[]; preflighted: CheckablePayment[] };

function fakeEngine(
  behaviour: {
    preflight?: () => Promise<`0x${string}`>;
    settle?: () => Promise<PaymentRow>;
    rows?: Map<string, PaymentRow>;
  } = {},
): FakeEngine {
  const settled: CheckablePayment[] = [];
  const preflighted: CheckablePayment[] = [];
  return {
    settled,
    preflighted,
    async preflight(payment) {
      preflighted.push(payment);
      return behaviour.preflight ? behaviour.preflight() : PAYER;
    },
    async settleAuthorization(payment) {
      settled.push(payment);
      return behaviour.settle ? behaviour.settle() : row({ status: "settled", tx_hash: TX });
    },
    async getPayment(nonce) {
      return behaviour.rows?.get(nonce);
    },
  };
}

function row(fields: Partial<PaymentRow>): PaymentRow {
  return {
    id: 1,
    nonce: NONCE,
    network: "eip155:31337",
    token: TOKEN.toLowerCase() as `0x${string}`,
    payer: PAYER.toLowerCase() as `0x${string}`,
    pay_to: PAY_TO.toLowerCase() as `0x${string}`,
    amount: 500_000n,
    memo: null,
    scheme: "exact",
    source: "x402",
    valid_after: 0n,
    valid_before: BigInt(NOW + 300),
    signature: SIGNATURE as `0x${string}`,
    status: "settled",
    batch_id: null,
    tx_hash: null,
    block_number: null,
    failure_code: null,
    failure_message: null,
    proof: null,
    attempts: 1,
    created_at: new Date(NOW * 1000),
    settled_at: null,
    ...fields,
  };
}

// A real store (PGlite, or PostgreSQL when DATABASE_URL is set) for the x402 request owners; the
// engine is a stand-in, so payment rows come from `rows`.
let store: Store;
beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
});
afterAll(async () => {
  await store?.close();
});
beforeEach(async () => {
  await store.exec("DELETE FROM x402_settle_requests");
});

function appWith(engine: FakeEngine, options: { store?: Queryable; nowMs?: number } = {}) {
  const app = new Hono();
  app.onError((error) => errorResponse(error));
  app.route(
    "/x402",
    x402Routes({
      engine,
      supported,
      store: options.store ?? store,
      clock: createFixedClock(options.nowMs ?? NOW * 1000),
    }),
  );
  return app;
}

function requirements(overrides: Record<string, unknown> = {}) {
  return {
    scheme: "exact",
    network: "eip155:31337",
    amount: "500000",
    asset: TOKEN,
    payTo: PAY_TO,
    maxTimeoutSeconds: 300,
    extra: { name: "USD Coin", version: "2" },
    ...overrides,
  };
}

function body(
  options: {
    requirements?: Record<string, unknown>;
    accepted?: Record<string, unknown>;
    authorization?: Record<string, unknown>;
    payload?: Record<string, unknown>;
    version?: number;
  } = {},
) {
  const req = options.requirements ?? requirements();
  return {
    x402Version: options.version ?? 2,
    paymentPayload: {
      x402Version: options.version ?? 2,
      resource: { url: "http://127.0.0.1/paid" },
      accepted: options.accepted ?? req,
      payload: options.payload ?? {
        authorization: {
          from: PAYER,
          to: PAY_TO,
          value: "500000",
          validAfter: "0",
          validBefore: String(NOW + 300),
          nonce: NONCE,
          ...options.authorization,
        },
        signature: SIGNATURE,
      },
    },
    paymentRequirements: req,
  };
}

async function post(app: Hono, path: "verify" | "settle", payload: unknown) {
  const response = await app.request(`/x402/${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof payload === "string" ? payload : JSON.stringify(payload),
  });
  return {
    status: response.status,
    headers: response.headers,
    json: (await response.json()) as Record<string, unknown>,
  };
}

describe("GET /x402/supported", () => {
  it("lists exact for x402 v2 on each network with tokens, and the signers under eip155:*", async () => {
    const response = await appWith(fakeEngine()).request("/x402/supported");
    expect(await response.json()).toEqual({
      kinds: [{ x402Version: 2, scheme: "exact", network: "eip155:31337" }],
      extensions: [],
      signers: { "eip155:*": [SIGNER] },
    });
  });

  it("lists nothing when the facilitator does not offer the exact scheme", () => {
    expect(x402Supported({ ...supported, schemes: ["subscription"] })).toEqual({
      kinds: [],
      extensions: [],
      signers: {},
    });
  });
});

describe("POST /x402/verify", () => {
  it("answers isValid with the payer the engine recovered, after its preflight", async () => {
    const engine = fakeEngine();
    const { status, json } = await post(appWith(engine), "verify", body());
    expect(status).toBe(200);
    expect(json).toEqual({ isValid: true, payer: PAYER });
    expect(engine.preflighted).toEqual([
      {
        network: "eip155:31337",
        token: TOKEN,
        authorization: {
          from: PAYER,
          to: PAY_TO,
          value: "500000",
          validAfter: "0",
          validBefore: String(NOW + 300),
          nonce: NONCE,
        },
        signature: SIGNATURE,
      },
    ]);
  });

  it("answers 400 with Tollgate's error body for a body that is not an x402 request", async () => {
    const app = appWith(fakeEngine());
    const notJson = await post(app, "verify", "{not json");
    expect(notJson.status).toBe(400);
    expect(notJson.json).toMatchObject({ error: { code: "InvalidRequest" } });
    const { paymentRequirements: _, ...missing } = body();
    const incomplete = await post(app, "verify", missing);
    expect(incomplete.status).toBe(400);
    expect(incomplete.json).toMatchObject({ error: { code: "InvalidRequest" } });
    const noAmount = await post(app, "verify", body({ requirements: requirements({ amount: undefined }) }));
    expect(noAmount.status).toBe(400);
  });

  const refusals: [string, Parameters<typeof body>[0], string][] = [
    ["an x402 v1 body", { version: 1 }, "invalid_x402_version"],
    ["another scheme", { requirements: requirements({ scheme: "upto" }) }, "unsupported_scheme"],
    [
      "a payload made for another network than the requirements",
      { accepted: requirements({ network: "eip155:84532" }) },
      "invalid_exact_evm_network_mismatch",
    ],
    [
      "a network it does not settle",
      { requirements: requirements({ network: "eip155:8453" }) },
      "invalid_network",
    ],
    [
      "an asset it does not settle",
      { requirements: requirements({ asset: "0x1111111111111111111111111111111111111111" }) },
      "invalid_payment_requirements",
    ],
    [
      "requirements without the EIP-712 domain",
      { requirements: requirements({ extra: {} }) },
      "invalid_exact_evm_missing_eip712_domain",
    ],
    [
      "another EIP-712 name than the token's",
      { requirements: requirements({ extra: { name: "USDC", version: "2" } }) },
      "invalid_exact_evm_token_name_mismatch",
    ],
    [
      "another EIP-712 version than the token's",
      { requirements: requirements({ extra: { name: "USD Coin", version: "1" } }) },
      "invalid_exact_evm_token_version_mismatch",
    ],
    [
      "a Permit2 payload",
      { payload: { permit2Authorization: { from: PAYER }, signature: SIGNATURE } },
      "unsupported_payload_type",
    ],
    ["a payload without an authorization", { payload: { signature: SIGNATURE } }, "invalid_payload"],
    [
      "a smart-wallet signature",
      {
        payload: {
          authorization: body().paymentPayload.payload.authorization,
          signature: `0x${"11".repeat(200)}`,
        },
      },
      "invalid_exact_evm_signature",
    ],
    ["a payee other than payTo", { authorization: { to: SIGNER } }, "invalid_exact_evm_recipient_mismatch"],
    [
      "a value other than the amount",
      { authorization: { value: "499999" } },
      "invalid_exact_evm_payload_authorization_value_mismatch",
    ],
    [
      "an authorization expiring within 6 s",
      { authorization: { validBefore: String(NOW + 6) } },
      "invalid_exact_evm_payload_authorization_valid_before",
    ],
    [
      "an authorization not valid yet",
      { authorization: { validAfter: String(NOW) } },
      "invalid_exact_evm_payload_authorization_valid_after",
    ],
    [
      "an authorization outliving maxTimeoutSeconds beyond the clock-skew allowance",
      { authorization: { validBefore: String(NOW + 300 + 31) } },
      "invalid_exact_evm_payload_authorization_valid_before",
    ],
  ];

  for (const [what, options, reason] of refusals) {
    it(`refuses ${what} with ${reason}, before asking the chain`, async () => {
      const engine = fakeEngine();
      const { status, json } = await post(appWith(engine), "verify", body(options));
      expect(status).toBe(200);
      expect(json).toMatchObject({ isValid: false, invalidReason: reason });
      expect(typeof json.invalidMessage).toBe("string");
      expect(engine.preflighted).toEqual([]);
    });
  }

  it("accepts a validBefore slightly beyond maxTimeoutSeconds (a payer clock a little ahead)", async () => {
    const { json } = await post(
      appWith(fakeEngine()),
      "verify",
      body({ authorization: { validBefore: String(NOW + 330) } }),
    );
    expect(json).toMatchObject({ isValid: true });
  });

  const engineRefusals: [ErrorCode, Record<string, unknown> | undefined, string][] = [
    ["InvalidSignature", undefined, "invalid_exact_evm_signature"],
    ["InsufficientFunds", undefined, "invalid_exact_evm_insufficient_balance"],
    ["NonceAlreadyUsed", undefined, "invalid_exact_evm_nonce_already_used"],
    ["AuthorizationExpired", { validBefore: "1" }, "invalid_exact_evm_payload_authorization_valid_before"],
    ["AuthorizationExpired", { validAfter: "1" }, "invalid_exact_evm_payload_authorization_valid_after"],
    ["UnsupportedToken", undefined, "invalid_payment_requirements"],
    ["InvalidRequest", { revert: "Paused" }, "invalid_exact_evm_transaction_simulation_failed"],
    ["RateLimited", undefined, "unexpected_verify_error"],
  ];

  for (const [code, details, reason] of engineRefusals) {
    it(`maps the engine's ${code}${details ? ` (${Object.keys(details)[0]})` : ""} to ${reason}`, async () => {
      const engine = fakeEngine({
        preflight: () => Promise.reject(new TollgateError(code, "refused", { details })),
      });
      const { status, json } = await post(appWith(engine), "verify", body());
      expect(status).toBe(200);
      expect(json).toEqual({
        isValid: false,
        invalidReason: reason,
        invalidMessage: "refused",
        payer: PAYER,
      });
    });
  }

  it("answers 503 with Retry-After when the chain cannot be reached, in x402's shape and Tollgate's", async () => {
    const engine = fakeEngine({
      preflight: () =>
        Promise.reject(
          new TollgateError("ChainUnavailable", "the chain RPC cannot be reached", { retryAfter: 5 }),
        ),
    });
    const { status, headers, json } = await post(appWith(engine), "verify", body());
    expect(status).toBe(503);
    expect(headers.get("retry-after")).toBe("5");
    expect(json).toMatchObject({
      isValid: false,
      invalidReason: "unexpected_verify_error",
      payer: PAYER,
      error: { code: "ChainUnavailable" },
    });
  });
});

describe("POST /x402/settle", () => {
  it("settles through the engine and answers its transaction", async () => {
    const engine = fakeEngine();
    const { status, json } = await post(appWith(engine), "settle", body());
    expect(status).toBe(200);
    expect(json).toEqual({ success: true, transaction: TX, network: "eip155:31337", payer: PAYER });
    expect(engine.settled).toHaveLength(1);
  });

  it("answers the request that settled an authorization with its transaction again, even after its window closed", async () => {
    const engine = fakeEngine({ rows: new Map([[NONCE, row({ status: "settled", tx_hash: TX })]]) });
    await claimX402Request(store, NONCE, x402RequestHash(body() as never));
    const later = (NOW + 3600) * 1000;
    const { json } = await post(appWith(engine, { nowMs: later }), "settle", body());
    expect(json).toEqual({ success: true, transaction: TX, network: "eip155:31337", payer: PAYER });
    expect(engine.settled).toEqual([]);
  });

  it("does not take another authorization's settlement for its own", async () => {
    const engine = fakeEngine({
      rows: new Map([[NONCE, row({ status: "settled", tx_hash: TX, amount: 1n })]]),
      settle: () => Promise.reject(new TollgateError("NonceAlreadyUsed", "nonce used")),
    });
    const { json } = await post(appWith(engine), "settle", body());
    expect(json).toMatchObject({
      success: false,
      errorReason: "invalid_exact_evm_nonce_already_used",
      transaction: "",
      payer: PAYER,
    });
  });

  it("refuses with success: false, an empty transaction and the network", async () => {
    const engine = fakeEngine();
    const { status, json } = await post(appWith(engine), "settle", body({ authorization: { value: "1" } }));
    expect(status).toBe(200);
    expect(json).toEqual({
      success: false,
      errorReason: "invalid_exact_evm_payload_authorization_value_mismatch",
      errorMessage: expect.any(String),
      transaction: "",
      network: "eip155:31337",
      payer: PAYER,
    });
    expect(engine.settled).toEqual([]);
  });

  it("reports a transfer the chain refused in its batch as invalid_exact_evm_transaction_failed", async () => {
    const engine = fakeEngine({
      settle: () => Promise.reject(new TollgateError("InvalidRequest", "the chain refused the transfer")),
    });
    const { json } = await post(appWith(engine), "settle", body());
    expect(json).toMatchObject({ success: false, errorReason: "invalid_exact_evm_transaction_failed" });
  });

  it("reports a payment still settling as settlement_pending with its batch transaction", async () => {
    const batches: Queryable = {
      async query(sql, params) {
        if (!sql.includes("settlement_batches")) return store.query(sql, params);
        expect(params).toEqual([7]);
        return [
          {
            id: 7,
            status: "submitted",
            network: "eip155:31337",
            token: TOKEN.toLowerCase(),
            sender: SIGNER.toLowerCase(),
            sender_nonce: 3,
            tx_hash: TX,
            raw_tx: "0x02",
            item_count: 1,
          },
        ] as never[];
      },
      exec: (sql) => store.exec(sql),
    };
    const rows = new Map<string, PaymentRow>();
    const engine = fakeEngine({
      rows,
      settle: async () => {
        rows.set(NONCE, row({ status: "submitted", batch_id: 7 }));
        throw new TollgateError("ChainUnavailable", "settlement is taking longer than expected", {
          retryAfter: 5,
          details: { nonce: NONCE, status: "submitted" },
        });
      },
    });
    const { status, json } = await post(appWith(engine, { store: batches }), "settle", body());
    expect(status).toBe(200);
    expect(json).toMatchObject({
      success: false,
      errorReason: "settlement_pending",
      transaction: TX,
      payer: PAYER,
    });
  });

  it("answers 503 with Retry-After when the chain cannot be reached", async () => {
    const engine = fakeEngine({
      settle: () => Promise.reject(new TollgateError("ChainUnavailable", "down", { retryAfter: 5 })),
    });
    const { status, headers, json } = await post(appWith(engine), "settle", body());
    expect(status).toBe(503);
    expect(headers.get("retry-after")).toBe("5");
    expect(json).toMatchObject({
      success: false,
      errorReason: "unexpected_settle_error",
      transaction: "",
      network: "eip155:31337",
      error: { code: "ChainUnavailable" },
    });
  });
});

describe("one transfer is answered as settled to one x402 request", () => {
  /** An engine whose settle records the payment as settled, as the real one does. */
  function settlingEngine(rows = new Map<string, PaymentRow>()) {
    return fakeEngine({
      rows,
      settle: async () => {
        const settled = rows.get(NONCE) ?? row({ status: "settled", tx_hash: TX });
        rows.set(NONCE, settled);
        return settled;
      },
    });
  }
  const nonceUsed = { success: false, errorReason: "invalid_exact_evm_nonce_already_used", transaction: "" };

  it("refuses, in settle and verify, an authorization that a Tollgate payment used", async () => {
    const tollgate = row({ source: "tollgate", memo: "a-memo", status: "settled", tx_hash: TX });
    const engine = settlingEngine(new Map([[NONCE, tollgate]]));
    const app = appWith(engine);
    expect((await post(app, "settle", body())).json).toMatchObject({ ...nonceUsed, payer: PAYER });
    expect((await post(app, "verify", body())).json).toMatchObject({
      isValid: false,
      invalidReason: "invalid_exact_evm_nonce_already_used",
    });
    // Still being settled through /authorize: refused all the same.
    const pendingEngine = settlingEngine(new Map([[NONCE, { ...tollgate, status: "pending" as const }]]));
    expect((await post(appWith(pendingEngine), "settle", body())).json).toMatchObject(nonceUsed);
    for (const e of [engine, pendingEngine]) {
      expect(e.settled).toEqual([]);
      expect(e.preflighted).toEqual([]);
    }
    expect(await findX402Request(store, NONCE)).toBeUndefined();
  });

  /** A body as a Tollgate gate sends it: its own requirements, naming the gate. */
  const fromGate = (gate = "a") => {
    const req = requirements({ extra: { name: "USD Coin", version: "2", tollgateGate: gate } });
    return { ...body(), paymentRequirements: req };
  };

  it("answers a gate's identical request again, and refuses the same payload in any other request", async () => {
    const engine = settlingEngine();
    const app = appWith(engine);
    const settled = { success: true, transaction: TX, network: "eip155:31337", payer: PAYER };
    expect((await post(app, "settle", fromGate())).json).toEqual(settled);
    // The same body, keys in another order: the same request, answered again (a gate's retry).
    const { paymentRequirements, paymentPayload, x402Version } = fromGate();
    for (let i = 0; i < 2; i++) {
      expect((await post(app, "settle", { paymentRequirements, paymentPayload, x402Version })).json).toEqual(
        settled,
      );
    }
    expect(engine.settled).toHaveLength(1);

    const others: Record<string, unknown>[] = [
      fromGate("b"),
      body(),
      { ...fromGate(), paymentRequirements: { ...fromGate().paymentRequirements, maxTimeoutSeconds: 600 } },
      {
        ...fromGate(),
        paymentPayload: { ...body().paymentPayload, resource: { url: "http://other.test/paid" } },
      },
    ];
    for (const other of others) {
      expect((await post(app, "settle", other)).json).toMatchObject({ ...nonceUsed, payer: PAYER });
      expect((await post(app, "verify", other)).json).toMatchObject({
        isValid: false,
        invalidReason: "invalid_exact_evm_nonce_already_used",
      });
    }
    expect(engine.settled).toHaveLength(1);
  });

  it("answers a standard resource server's request success once, even to concurrent copies", async () => {
    const engine = settlingEngine();
    const app = appWith(engine);
    const replies = await Promise.all([post(app, "settle", body()), post(app, "settle", body())]);
    expect(replies.map((r) => r.json.success).sort()).toEqual([false, true]);
    expect(replies.find((r) => r.json.success === false)?.json).toMatchObject(nonceUsed);
    // A replay later (x402's upfront flow settles without verifying): refused.
    expect((await post(app, "settle", body())).json).toMatchObject(nonceUsed);
  });

  it("answers a standard resource server's retry after settlement_pending", async () => {
    const rows = new Map<string, PaymentRow>();
    let confirmed = false;
    const engine = fakeEngine({
      rows,
      settle: async () => {
        if (!confirmed) {
          rows.set(NONCE, row({ status: "submitted", tx_hash: null }));
          throw new TollgateError("ChainUnavailable", "settlement is taking longer than expected", {
            retryAfter: 5,
            details: { nonce: NONCE, status: "submitted" },
          });
        }
        rows.set(NONCE, row({ status: "settled", tx_hash: TX }));
        return rows.get(NONCE) as PaymentRow;
      },
    });
    const app = appWith(engine);
    expect((await post(app, "settle", body())).json).toMatchObject({
      success: false,
      errorReason: "settlement_pending",
    });
    confirmed = true;
    expect((await post(app, "settle", body())).json).toMatchObject({ success: true, transaction: TX });
    expect((await post(app, "settle", body())).json).toMatchObject(nonceUsed);
  });

  it("lets exactly one of two different requests racing for one authorization have it", async () => {
    const engine = settlingEngine();
    const app = appWith(engine);
    const one = fromGate("a");
    const two = fromGate("b");
    const replies = await Promise.all([post(app, "settle", one), post(app, "settle", two)]);
    const successes = replies.filter((r) => r.json.success === true);
    expect(successes).toHaveLength(1);
    const winner = successes[0] === replies[0] ? one : two;
    const loser = winner === one ? two : one;
    expect((await post(app, "settle", winner)).json).toMatchObject({ success: true, transaction: TX });
    expect((await post(app, "settle", loser)).json).toMatchObject(nonceUsed);
    expect(await findX402Request(store, NONCE)).toBe(x402RequestHash(winner as never));
  });

  it("answers an x402 payment whose request is unknown to no request", async () => {
    const engine = settlingEngine(new Map([[NONCE, row({ status: "settled", tx_hash: TX })]]));
    expect((await post(appWith(engine), "settle", body())).json).toMatchObject(nonceUsed);
    expect(engine.settled).toEqual([]);
  });

  it("records no owner for a request the preflight refused", async () => {
    const engine = fakeEngine({
      preflight: () => Promise.reject(new TollgateError("InvalidSignature", "not signed by from")),
    });
    const { json } = await post(appWith(engine), "settle", body());
    expect(json).toMatchObject({ success: false, errorReason: "invalid_exact_evm_signature" });
    expect(engine.settled).toEqual([]);
    expect(await findX402Request(store, NONCE)).toBeUndefined();
  });
});
