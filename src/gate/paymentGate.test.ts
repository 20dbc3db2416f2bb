import { randomBytes } from "node:crypto";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { beforeEach, describe, expect, it } from "vitest";
import { signProofFor } from "../../test/support/signProofFor.ts";
import { jwksOf, proofKeyFromSeed } from "../facilitator/proofKeys.ts";
import type { FetchFn } from "../http/facilitatorClient.ts";
import { base64Encode, base64UrlDecode, base64UrlEncode } from "../protocol/base64.ts";
import { createFixedClock, unixSeconds } from "../protocol/clock.ts";
import type { Jwks } from "../protocol/facilitator.ts";
import { decodeJsonHeader, encodeJsonHeader } from "../protocol/header.ts";
import { memoQueryHash } from "../protocol/memo.ts";
import { type PaymentProof, PaymentResponseSchema } from "../protocol/paymentProof.ts";
import { type PaymentRequired, PaymentRequiredSchema } from "../protocol/paymentRequired.ts";
import { createJwksResolver } from "../schemes/exact/gate/proofKeyResolver.ts";
import { createMemoryReplayGuard } from "../store/createMemoryReplayGuard.ts";
import { honoPaymentGate, type PaymentGateEnv } from "./honoPaymentGate.ts";
import { sealMemo } from "./memo.ts";
import { type GatePayment, paymentGate } from "./paymentGate.ts";
import type { PaymentGateOptions } from "./paymentGateOptions.ts";

const NETWORK = "eip155:31337";
const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const OTHER_TOKEN = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512";
const PAY_TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const OTHER_PAY_TO = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
const PAYER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
const TX = `0x${"ab".repeat(32)}` as const;
const SECRET = "a-test-memo-secret-that-is-at-least-32-bytes-long";
const START_MS = 1_763_800_000_000;

const facilitatorKey = proofKeyFromSeed(new Uint8Array(32).fill(7));
const strangerKey = proofKeyFromSeed(new Uint8Array(32).fill(9));
const jwks: Jwks = jwksOf([facilitatorKey]);

/** Unit tests never reach a facilitator: a call is a test failure. */
const noNetwork: FetchFn = async (input) => {
  throw new Error(`unexpected fetch of ${String(input)}`);
};

function setup(overrides: Partial<PaymentGateOptions> = {}) {
  const clock = createFixedClock(START_MS);
  const gate = paymentGate({
    payTo: PAY_TO,
    network: NETWORK,
    token: { address: TOKEN, name: "USD Coin", version: "2" },
    facilitator: "http://facilitator.test",
    fetch: noNetwork,
    memoSecret: SECRET,
    clock,
    proofKeys: jwks,
    routes: {
      "GET /api/reports/:id": { price: "0.50", description: "one report" },
      "POST /api/summarize": { amount: 20_000n },
      "/api/any/*": { pricing: [{ type: "one-time", price: "0.01" }] },
      "GET /api/cheap-or-fast": {
        pricing: [
          { type: "one-time", price: "0.02" },
          { type: "one-time", price: "0.05" },
        ],
      },
    },
    ...overrides,
  });
  const served: (GatePayment | undefined)[] = [];
  /** What the handler does on its next runs, in order (then 200): a status to answer, or throw. */
  const script: (ContentfulStatusCode | "throw")[] = [];
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.all("/api/*", (c) => {
    served.push(c.get("payment"));
    const next = script.shift() ?? 200;
    if (next === "throw") throw new Error("the handler's upstream is down");
    return c.json({ resource: c.req.path }, next);
  });
  app.onError((_error, c) => c.json({ error: { code: "Internal", message: "handler failed" } }, 500));
  return { clock, gate, app, served, script };
}

type Kit = ReturnType<typeof setup>;

async function offer(kit: Kit, path = "/api/reports/1", method = "GET"): Promise<PaymentRequired> {
  const response = await kit.app.request(path, { method });
  expect(response.status).toBe(402);
  return PaymentRequiredSchema.parse(await response.json());
}

/** What a facilitator would sign after settling `memo`, with fields overridable to forge attacks. */
function proofFor(
  kit: Kit,
  body: PaymentRequired,
  overrides: Partial<PaymentProof> = {},
  key = facilitatorKey,
): PaymentProof {
  // The key's own kid is what a facilitator signs with; a forged `sig` is set after signing, if at all.
  const { sig: _sig, kid: _kid, ...fields } = overrides;
  return signProofFor(key, body.accepts[0]!, unixSeconds(kit.clock), { payer: PAYER, tx: TX, ...fields });
}

async function pay(kit: Kit, proof: PaymentProof | string, path = "/api/reports/1", method = "GET") {
  const header = typeof proof === "string" ? proof : encodeJsonHeader(proof);
  return kit.app.request(path, { method, headers: { "X-PAYMENT": header } });
}

async function expectRefused(kit: Kit, response: Response, reason: RegExp) {
  expect(response.status).toBe(402);
  const body = PaymentRequiredSchema.parse(await response.json());
  expect(body.error).toBe("InvalidPaymentProof");
  expect(body.message).toMatch(reason);
  expect(kit.served).toHaveLength(0);
}

describe("paymentGate: the 402", () => {
  let kit: Kit;
  beforeEach(() => {
    kit = setup();
  });

  it("answers an unpaid request with 402 PaymentRequired and never runs the handler", async () => {
    const response = await kit.app.request("/api/reports/1");
    expect(response.status).toBe(402);
    expect(response.headers.get("content-type")).toBe("application/json");
    expect(response.headers.get("cache-control")).toBe("no-store");
    const body = PaymentRequiredSchema.parse(await response.json());
    expect(body).toMatchObject({ version: "1", error: "PaymentRequired" });
    expect(body.accepts).toEqual([
      expect.objectContaining({
        scheme: "exact",
        network: NETWORK,
        token: TOKEN,
        amount: "500000",
        payTo: PAY_TO,
        description: "one report",
        tollgate: { subscriptionScheme: false, facilitator: "http://facilitator.test" },
      }),
    ]);
    expect(kit.served).toHaveLength(0);
  });

  it("binds each memo to method, path, query, amount, payee, network, token and a 300 s expiry", async () => {
    const body = await offer(kit, "/api/reports/7?format=pdf");
    const [payload] = body.accepts[0]!.memo.split(".");
    expect(JSON.parse(Buffer.from(base64UrlDecode(payload!)).toString("utf8"))).toEqual({
      m: "GET",
      p: "/api/reports/7",
      q: memoQueryHash("format=pdf"),
      a: "500000",
      t: PAY_TO,
      n: NETWORK,
      k: TOKEN,
      e: unixSeconds(kit.clock) + 300,
      r: expect.stringMatching(/^[A-Za-z0-9_-]{16}$/),
    });
  });

  it("issues a fresh memo for every 402 and one per pricing entry", async () => {
    const first = await offer(kit, "/api/cheap-or-fast");
    const second = await offer(kit, "/api/cheap-or-fast");
    expect(first.accepts.map((o) => o.amount)).toEqual(["20000", "50000"]);
    const memos = [...first.accepts, ...second.accepts].map((o) => o.memo);
    expect(new Set(memos).size).toBe(4);
  });

  it("carries an x402 v2 PAYMENT-REQUIRED header that x402's own decoder reads", async () => {
    const response = await kit.app.request("http://api.test/api/summarize", { method: "POST" });
    const header = response.headers.get("PAYMENT-REQUIRED");
    expect(header).not.toBeNull();
    const decoded = decodePaymentRequiredHeader(header!);
    expect(decoded).toEqual({
      x402Version: 2,
      error: "payment required",
      // No publicOrigin: the path alone, never the request's Host.
      resource: { url: "/api/summarize", description: "", mimeType: "application/json" },
      accepts: [
        {
          scheme: "exact",
          network: NETWORK,
          amount: "20000",
          asset: TOKEN,
          payTo: PAY_TO,
          maxTimeoutSeconds: 300,
          extra: { name: "USD Coin", version: "2" },
        },
      ],
    });
  });

  it("uses the configured public origin in resource URLs", async () => {
    const behindProxy = setup({ publicOrigin: "https://api.example.com" });
    const response = await behindProxy.app.request("http://10.0.0.5:8080/api/reports/1?x=1");
    const decoded = decodePaymentRequiredHeader(response.headers.get("PAYMENT-REQUIRED")!);
    expect(decoded.resource.url).toBe("https://api.example.com/api/reports/1?x=1");
  });

  it("lets requests no route prices through unpaid, and CORS preflights too", async () => {
    const result = await kit.gate(new Request("http://api.test/api/free"));
    expect(result).toMatchObject({ kind: "pass" });
    expect(result.kind === "pass" && result.paid).toBeUndefined();
    const everything = setup({ routes: undefined, pricing: [{ type: "one-time", amount: 1n }] });
    expect((await everything.gate(new Request("http://api.test/x"))).kind).toBe("respond");
    expect((await everything.gate(new Request("http://api.test/x", { method: "OPTIONS" }))).kind).toBe(
      "pass",
    );
  });

  it.each([
    ["HEAD", "/api/reports/1"],
    ["GET", "/API/Reports/1"],
    ["GET", "/api/r%65ports/1"],
    ["POST", "/api/summarize/"],
    ["GET", "/api/x/../reports/1"],
  ])("prices %s %s, which a router would send to a paid handler", async (method, path) => {
    const result = await kit.gate(new Request(`http://api.test${path}`, { method }));
    expect(result.kind).toBe("respond");
    expect(result.kind === "respond" && result.response.status).toBe(402);
  });

  it("answers 400 for a target it cannot read safely (a malformed escape), without running the handler", async () => {
    const result = await kit.gate({ method: "GET", url: "/api/r%65ports/%ZZ", headers: new Headers() });
    expect(result.kind === "respond" && result.response.status).toBe(400);
    const response = await kit.app.request("/api/reports/%ZZ");
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: { code: "InvalidRequest", message: "the request path has a malformed percent-escape" },
    });
    expect(kit.served).toHaveLength(0);
  });

  it("binds the memo to the path as sent, so a differently spelled path cannot reuse it", async () => {
    const proof = proofFor(kit, await offer(kit, "/api/r%65ports/1"));
    await expectRefused(kit, await pay(kit, proof, "/api/reports/1"), /another route/);
  });

  it("refuses a PAYMENT-SIGNATURE that is not an x402 payment with a fresh 402, never reaching the handler", async () => {
    const response = await kit.app.request("/api/reports/1", { headers: { "PAYMENT-SIGNATURE": "e30=" } });
    expect(response.status).toBe(402);
    const body = PaymentRequiredSchema.parse(await response.json());
    expect(body.error).toBe("InvalidPaymentProof");
    expect(body.message).toMatch(/x402/);
    expect(decodePaymentRequiredHeader(response.headers.get("PAYMENT-REQUIRED") ?? "").error).toBe(
      "invalid_payload",
    );
    expect(kit.served).toHaveLength(0);
  });
});

describe("paymentGate: accepting a proof", () => {
  let kit: Kit;
  beforeEach(() => {
    kit = setup();
  });

  it("runs the handler once for a valid proof and answers with X-PAYMENT-RESPONSE", async () => {
    const proof = proofFor(kit, await offer(kit));
    const response = await pay(kit, proof);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ resource: "/api/reports/1" });
    const receipt = decodeJsonHeader(response.headers.get("X-PAYMENT-RESPONSE")!, PaymentResponseSchema);
    expect(receipt).toEqual({ success: true, transaction: TX, network: NETWORK, payer: PAYER });
    expect(kit.served).toEqual([
      expect.objectContaining({
        scheme: "exact",
        payer: PAYER,
        amount: 500_000n,
        transaction: TX,
        memo: proof.memo,
      }),
    ]);
  });

  it("accepts a proof on the retry of the same query, and refuses it for another query of the path", async () => {
    // Memos bind the query (a route priced by a function may price by it), so each query is paid for.
    const other = proofFor(kit, await offer(kit, "/api/reports/3?page=1"));
    await expectRefused(kit, await pay(kit, other, "/api/reports/3?page=2"), /another query/);
    await expectRefused(kit, await pay(kit, other, "/api/reports/3"), /another query/);
    const proof = proofFor(kit, await offer(kit, "/api/reports/3?page=1"));
    expect((await pay(kit, proof, "/api/reports/3?page=1")).status).toBe(200);
  });

  it("accepts a proof for any of several offered prices", async () => {
    const body = await offer(kit, "/api/cheap-or-fast");
    const second = { ...body, accepts: [body.accepts[1]!] };
    const response = await pay(kit, proofFor(kit, second), "/api/cheap-or-fast");
    expect(response.status).toBe(200);
    expect(kit.served[0]?.amount).toBe(50_000n);
  });

  it("refuses a proof whose memo names the request but pays less than the request costs now", async () => {
    let price = "0.01";
    const priced = setup({ routes: ({ path }) => (path === "/api/image" ? { price } : undefined) });
    const proof = proofFor(priced, await offer(priced, "/api/image"));
    price = "0.05";
    await expectRefused(
      priced,
      await pay(priced, proof, "/api/image"),
      /pays 10000, less than this request's price 50000/,
    );
    price = "0.01";
    expect((await pay(priced, proof, "/api/image")).status).toBe(200);
  });

  it("refuses any proof on a request sold only by subscription", async () => {
    let subscriptionOnly = false;
    const priced = setup({
      publicOrigin: "https://api.example.com",
      routes: () =>
        subscriptionOnly ? { pricing: [{ type: "subscription", plan: "3" }] } : { price: "0.01" },
    });
    const proof = proofFor(priced, await offer(priced, "/api/image"));
    subscriptionOnly = true;
    const response = await pay(priced, proof, "/api/image");
    // The plan cannot be read (no facilitator here): the gate says so rather than take the proof.
    expect(response.status).not.toBe(200);
    expect(priced.served).toHaveLength(0);
  });
});

describe("paymentGate: a proof is used up only by a request that was served", () => {
  let kit: Kit;
  beforeEach(() => {
    kit = setup();
  });

  it("accepts the same proof again after the handler answered 500, and runs the handler", async () => {
    const proof = proofFor(kit, await offer(kit));
    kit.script.push(500);
    expect((await pay(kit, proof)).status).toBe(500);
    const retry = await pay(kit, proof);
    expect(retry.status).toBe(200);
    expect(await retry.json()).toEqual({ resource: "/api/reports/1" });
    expect(kit.served).toHaveLength(2);
    kit.served.length = 0;
    await expectRefused(kit, await pay(kit, proof), /already used/);
  });

  it("accepts the same proof again after the handler threw", async () => {
    const proof = proofFor(kit, await offer(kit));
    kit.script.push("throw");
    expect((await pay(kit, proof)).status).toBe(500);
    expect((await pay(kit, proof)).status).toBe(200);
    expect(kit.served).toHaveLength(2);
  });

  it("keeps handing a proof back while the handler keeps failing, and serves it once it recovers", async () => {
    const proof = proofFor(kit, await offer(kit));
    kit.script.push(503, 502, 500);
    for (const status of [503, 502, 500]) expect((await pay(kit, proof)).status).toBe(status);
    expect((await pay(kit, proof)).status).toBe(200);
    kit.served.length = 0;
    await expectRefused(kit, await pay(kit, proof), /already used/);
  });

  it.each([200, 201, 400, 404, 422] as const)(
    "keeps the proof used up after the handler answered %i",
    async (status) => {
      const proof = proofFor(kit, await offer(kit));
      kit.script.push(status);
      expect((await pay(kit, proof)).status).toBe(status);
      kit.served.length = 0;
      // Used for good, not merely in flight: the lease passing changes nothing.
      kit.clock.advance(61_000);
      await expectRefused(kit, await pay(kit, proof), /already used/);
    },
  );

  it("counts only the first report of a request, so a late one cannot free a proof served since", async () => {
    const proof = proofFor(kit, await offer(kit));
    const request = () =>
      new Request("http://gate.test/api/reports/1", { headers: { "X-PAYMENT": encodeJsonHeader(proof) } });
    const first = await kit.gate(request());
    if (first.kind !== "pass") throw new Error("expected the proof to pass");
    await first.complete(500);
    const second = await kit.gate(request());
    if (second.kind !== "pass") throw new Error("expected the released proof to pass");
    await second.complete(200);
    await first.complete(500);
    await second.complete(500);
    expect((await kit.gate(request())).kind).toBe("respond");
  });

  it("holds a proof whose request never reported in flight, then serves the same request again after the lease, three times at most", async () => {
    const proof = proofFor(kit, await offer(kit));
    const request = () =>
      new Request("http://gate.test/api/reports/1", { headers: { "X-PAYMENT": encodeJsonHeader(proof) } });
    expect((await kit.gate(request())).kind).toBe("pass");
    // The gate that took it may still answer: a re-send is told to wait out the lease (default 60 s).
    kit.clock.advance(20_000);
    const early = await kit.gate(request());
    if (early.kind !== "respond") throw new Error("expected a refusal while in flight");
    expect(early.response.status).toBe(503);
    expect(early.response.headers.get("retry-after")).toBe("40");
    expect(await early.response.json()).toMatchObject({ error: { code: "PaymentInFlight" } });
    kit.clock.advance(40_000);
    expect((await kit.gate(request())).kind).toBe("pass");
    kit.clock.advance(60_000);
    expect((await kit.gate(request())).kind).toBe("pass");
    kit.clock.advance(60_000);
    const spent = await kit.gate(request());
    expect(spent.kind === "respond" && spent.response.status).toBe(402);
  });
});

describe("paymentGate: attacks are refused with 402 InvalidPaymentProof and the handler never runs", () => {
  let kit: Kit;
  beforeEach(() => {
    kit = setup();
  });

  it("refuses the same proof a second time", async () => {
    const proof = proofFor(kit, await offer(kit));
    expect((await pay(kit, proof)).status).toBe(200);
    kit.served.length = 0;
    await expectRefused(kit, await pay(kit, proof), /already used/);
  });

  it("accepts exactly one of many concurrent requests with the same proof", async () => {
    const proof = proofFor(kit, await offer(kit));
    const responses = await Promise.all(Array.from({ length: 25 }, () => pay(kit, proof)));
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    // 503 PaymentInFlight while the one that passed is being served, 402 once it was.
    expect(statuses.filter((s) => s === 402 || s === 503)).toHaveLength(24);
    expect(kit.served).toHaveLength(1);
  });

  it("refuses a proof for another path", async () => {
    const proof = proofFor(kit, await offer(kit, "/api/reports/1"));
    await expectRefused(kit, await pay(kit, proof, "/api/reports/2"), /another route/);
  });

  it("refuses a proof for another method", async () => {
    const proof = proofFor(kit, await offer(kit, "/api/any/thing", "GET"));
    await expectRefused(kit, await pay(kit, proof, "/api/any/thing", "DELETE"), /another route/);
  });

  it("refuses a proof whose amount differs from the memo's", async () => {
    const proof = proofFor(kit, await offer(kit), { amount: "1" });
    await expectRefused(kit, await pay(kit, proof), /amount/);
  });

  it("refuses a proof that pays another payee", async () => {
    const proof = proofFor(kit, await offer(kit), { payTo: OTHER_PAY_TO });
    await expectRefused(kit, await pay(kit, proof), /payee/);
  });

  it("refuses a memo priced for another payee, even with a matching proof", async () => {
    const other = setup({ payTo: OTHER_PAY_TO });
    const proof = proofFor(other, await offer(other));
    await expectRefused(kit, await pay(kit, proof), /payee/);
  });

  it("refuses a proof for another network", async () => {
    const proof = proofFor(kit, await offer(kit), { network: "eip155:8453" });
    await expectRefused(kit, await pay(kit, proof), /network/);
  });

  it("refuses a proof in another token", async () => {
    const proof = proofFor(kit, await offer(kit), { token: OTHER_TOKEN });
    await expectRefused(kit, await pay(kit, proof), /token/);
  });

  it("refuses a proof signed by a key the facilitator does not publish", async () => {
    const proof = proofFor(kit, await offer(kit), {}, strangerKey);
    await expectRefused(kit, await pay(kit, proof), /unknown key/);
  });

  it("refuses a proof whose signed fields were altered", async () => {
    const proof = proofFor(kit, await offer(kit));
    await expectRefused(kit, await pay(kit, { ...proof, payer: OTHER_PAY_TO }), /does not verify/);
  });

  it("refuses a proof with a signature copied from another proof", async () => {
    const body = await offer(kit);
    const proof = proofFor(kit, body);
    const twin = proofFor(kit, await offer(kit));
    await expectRefused(kit, await pay(kit, { ...twin, sig: proof.sig }), /does not verify/);
  });

  it("refuses an expired proof", async () => {
    const proof = proofFor(kit, await offer(kit));
    kit.clock.advance(300_000);
    await expectRefused(kit, await pay(kit, proof), /expired/);
  });

  it("refuses a payment settled long after its offer expired", async () => {
    const body = await offer(kit);
    kit.clock.advance(3_600_000);
    await expectRefused(kit, await pay(kit, proofFor(kit, body)), /after the offer expired/);
  });

  it("refuses a memo whose HMAC is forged", async () => {
    const body = await offer(kit);
    const [payload, mac] = body.accepts[0]!.memo.split(".");
    const claims = JSON.parse(Buffer.from(base64UrlDecode(payload!)).toString("utf8"));
    const cheaper = `${base64UrlEncode(JSON.stringify({ ...claims, a: "1" }))}.${mac}`;
    const forged = proofFor(kit, body, { memo: cheaper, amount: "1" });
    await expectRefused(kit, await pay(kit, forged), /not issued by this gate/);
  });

  it("refuses a memo sealed with another secret", async () => {
    const body = await offer(kit);
    const [payload] = body.accepts[0]!.memo.split(".");
    const claims = JSON.parse(Buffer.from(base64UrlDecode(payload!)).toString("utf8"));
    const memo = sealMemo(randomBytes(32), claims);
    await expectRefused(kit, await pay(kit, proofFor(kit, body, { memo })), /not issued by this gate/);
  });

  it("refuses a truncated header", async () => {
    const header = encodeJsonHeader(proofFor(kit, await offer(kit)));
    await expectRefused(kit, await pay(kit, header.slice(0, header.length - 7)), /X-PAYMENT/);
  });

  it("refuses a header that is not strict base64", async () => {
    const header = encodeJsonHeader(proofFor(kit, await offer(kit)));
    await expectRefused(kit, await pay(kit, `${header.slice(0, 20)}*${header.slice(21)}`), /not base64/);
    await expectRefused(kit, await pay(kit, "not base64 at all!"), /not base64/);
  });

  it("refuses an oversized header before decoding it", async () => {
    await expectRefused(kit, await pay(kit, "A".repeat(8196)), /over 8192 bytes/);
  });

  it("refuses base64 of something that is not a proof", async () => {
    await expectRefused(kit, await pay(kit, base64Encode("[1,2,3]")), /not a payment proof/);
    await expectRefused(kit, await pay(kit, base64Encode("{}")), /not a payment proof/);
    const proof = proofFor(kit, await offer(kit));
    await expectRefused(
      kit,
      await pay(kit, base64Encode(JSON.stringify({ ...proof, extra: 1 }))),
      /payment proof/,
    );
  });

  it("refuses an empty header", async () => {
    await expectRefused(kit, await pay(kit, ""), /X-PAYMENT/);
  });
});

describe("paymentGate: faults", () => {
  it("answers 503 while the JWKS cannot be fetched and accepts the same proof once it can", async () => {
    let up = false;
    const clock = createFixedClock(START_MS);
    const resolver = createJwksResolver({
      clock,
      minRefreshMs: 1000,
      loadJwks: async () => {
        if (!up) throw new Error("connection refused");
        return jwks;
      },
    });
    const kit = setup({ proofKeys: resolver, clock });
    const proof = proofFor(kit, await offer(kit));
    const down = await pay(kit, proof);
    expect(down.status).toBe(503);
    expect(down.headers.get("retry-after")).toBe("5");
    expect(await down.json()).toMatchObject({ error: { code: "ChainUnavailable" } });
    up = true;
    clock.advance(1000);
    expect((await pay(kit, proof)).status).toBe(200);
    expect(kit.served).toHaveLength(1);
  });

  it("answers 429 with Retry-After when the in-memory replay guard is full, without running the handler", async () => {
    const clock = createFixedClock(START_MS);
    const kit = setup({ clock, replayGuard: createMemoryReplayGuard({ clock, maxEntries: 1 }) });
    expect((await pay(kit, proofFor(kit, await offer(kit)))).status).toBe(200);
    const response = await pay(kit, proofFor(kit, await offer(kit)));
    expect(response.status).toBe(429);
    expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(kit.served).toHaveLength(1);
  });

  it("answers 500 without details when the replay guard fails, and never runs the handler", async () => {
    const kit = setup({
      replayGuard: {
        consume: async () => {
          throw new Error("connection terminated: secret internals");
        },
        release: async () => {
          throw new Error("connection terminated: secret internals");
        },
      },
    });
    const response = await pay(kit, proofFor(kit, await offer(kit)));
    expect(response.status).toBe(500);
    expect(JSON.stringify(await response.json())).not.toMatch(/secret internals/);
    expect(kit.served).toHaveLength(0);
  });
});

describe("paymentGate: remote proof verification", () => {
  it("asks the facilitator's /verify and honours its verdict", async () => {
    const verdicts: boolean[] = [];
    const facilitator = {
      url: "http://facilitator.test",
      authorize: async () => {
        throw new Error("not used");
      },
      jwks: async () => jwks,
      supported: async () => {
        throw new Error("not used");
      },
      request: async () => {
        throw new Error("not used");
      },
      verify: async () => {
        const valid = verdicts.shift() ?? false;
        return valid ? { valid } : { valid, reason: "unknown_kid" };
      },
    };
    const kit = setup({ facilitator, proofVerification: "remote", proofKeys: undefined });
    verdicts.push(false, true);
    const proof = proofFor(kit, await offer(kit));
    await expectRefused(kit, await pay(kit, proof), /facilitator refused the proof: unknown_kid/);
    expect((await pay(kit, proof)).status).toBe(200);
  });
});

describe("paymentGate: options are checked once, at construction", () => {
  const base = {
    payTo: PAY_TO,
    network: NETWORK,
    token: TOKEN,
    facilitator: "http://facilitator.test",
    fetch: noNetwork,
    memoSecret: SECRET,
    pricing: [{ type: "one-time" as const, price: "0.10" }],
  };

  it.each([
    [{ payTo: "0x123" }, /payTo/],
    [{ network: "base" }, /network/],
    [{ facilitator: "ftp://x" }, /facilitator/],
    [{ memoSecret: "short" }, /memoSecret: memo secret must be at least 32 bytes/],
    [{ pricing: [{ type: "one-time", price: "0.1234567" }] }, /pricing\[0\]\.price.*more than 6 decimals/],
    [{ pricing: [{ type: "one-time", amount: 0n }] }, /positive/],
    [{ pricing: [{ type: "one-time", amount: 0.5 }] }, /pricing/],
    [{ pricing: [{ type: "subscription", plan: "3" }] }, /subscription pricing needs `publicOrigin`/],
    [{ pricing: [{ type: "subscription", plan: "03" }], publicOrigin: "https://api.example.com" }, /plan/],
    [{ routes: { "GET /x": { price: "1", pricing: [{ type: "one-time", amount: "1" }] } } }, /exactly one/],
    [{ routes: { "GET /x": { price: "1", units: 5 } } }, /metered `units` need subscription pricing/],
    [{ routes: { "get /x": { price: "1" } } }, /route pattern/],
    [{ memoTtlSeconds: 5 }, /memoTtlSeconds/],
    [{ proofLeaseSeconds: 0 }, /proofLeaseSeconds/],
    // A guard that claims without settling would hold every proof in flight for good.
    [
      {
        replayGuard: {
          consume: async () => true,
          release: async () => undefined,
          claim: async () => ({ ok: true, token: "t" }),
        },
      },
      /claim and settle both, or neither/,
    ],
    [{ proofVerification: "remote", proofKeys: jwks }, /proofKeys is for local/],
    [{ unknownOption: true }, /unrecognized/i],
  ])("refuses a bad option (%#)", (override, message) => {
    expect(() => paymentGate({ ...base, ...override } as PaymentGateOptions)).toThrow(message);
  });

  it("accepts a minimal configuration", () => {
    expect(typeof paymentGate(base)).toBe("function");
  });
});
