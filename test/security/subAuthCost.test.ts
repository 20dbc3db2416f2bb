/**
 * Sub-auth cost: an unauthenticated request with a self-signed sub-auth token
 * must not buy a facilitator lookup (and its chain read) per request. What is free to check is checked
 * first (format, `aud`, `sub`, `exp`, `iat`, lifetime); unknown and inactive ids are remembered for a
 * short time, apart from the states of real subscribers, so a flood of made-up ids costs at most one
 * lookup per id per TTL and cannot push a real subscriber's state out of the gate's cache.
 * Over a real devnet, a real facilitator and a gate on a real socket; the gate's clock is injected so
 * the TTL is crossed by moving it, not by waiting.
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import type { LocalAccount } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createPlan } from "../../src/chain/actions/subscriptions/createPlan.ts";
import { getPlanIdFromReceipt } from "../../src/chain/events/decodeSubscriptionEvents.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer } from "../../src/client/createPayer.ts";
import { registerProvider } from "../../src/client/registerProvider.ts";
import { type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { type PaymentGate, type PaymentGateControls, paymentGate } from "../../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../../src/http/facilitatorClient.ts";
import { base64UrlEncode } from "../../src/protocol/base64.ts";
import { createFixedClock } from "../../src/protocol/clock.ts";
import { encodeSubAuthPayload, formatSubAuthToken } from "../../src/protocol/subscriptionAuth.ts";
import { startTestFacilitator, type TestFacilitator } from "../support/facilitatorHarness.ts";

/**
 * viem's EIP-191 recovery, passed through unchanged and counted: the gate's one costly step per token.
 * (Nothing of Tollgate is replaced; the count is what the test is about.)
 */
const recoveries = vi.hoisted(() => ({ count: 0 }));
vi.mock("viem", async (importOriginal) => {
  const viem = await importOriginal<typeof import("viem")>();
  return {
    ...viem,
    recoverMessageAddress: (...args: Parameters<typeof viem.recoverMessageAddress>) => {
      recoveries.count++;
      return viem.recoverMessageAddress(...args);
    },
  };
});

const TTL_MS = 5_000;

let devnet: Devnet;
let tf: TestFacilitator;
let provider: DevnetAccount;
let api: RunningServer;
let gate: PaymentGate & PaymentGateControls;
let planId: bigint;
const clock = createFixedClock(Date.now());
/** Subscription lookups the gate made at the facilitator, by id. */
const lookups = new Map<string, number>();

const countingFetch: typeof fetch = async (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input));
  const match = /^\/subscriptions\/(\d+)$/.exec(url.pathname);
  if (match !== null && (init?.method ?? "GET") === "GET") {
    lookups.set(match[1]!, (lookups.get(match[1]!) ?? 0) + 1);
  }
  return fetch(input, init);
};

const totalLookups = () => [...lookups.values()].reduce((a, b) => a + b, 0);

async function token(
  signer: LocalAccount,
  claims: { sub: string; aud?: string; iat?: number; exp?: number },
): Promise<string> {
  const now = Math.floor(clock.now() / 1000);
  const fields = {
    sub: claims.sub,
    aud: claims.aud ?? api.url,
    iat: claims.iat ?? now - 30,
    exp: claims.exp ?? now + 1800,
  };
  // Built by hand when the claims break a rule `encodeSubAuthPayload` enforces (a forger is not bound by it).
  const payload =
    fields.exp - fields.iat > 3600
      ? base64UrlEncode(
          JSON.stringify({ aud: fields.aud, exp: fields.exp, iat: fields.iat, sub: fields.sub }),
        )
      : encodeSubAuthPayload(fields);
  return formatSubAuthToken(payload, await signer.signMessage({ message: payload }));
}

async function request(subscriptionId: string, auth: string) {
  const response = await fetch(`${api.url}/api/report`, {
    headers: { "X-Tollgate-Sub": subscriptionId, "X-Tollgate-Sub-Auth": auth },
  });
  await response.arrayBuffer();
  return response.status;
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  provider = devnet.accounts[1]!;
  const hash = await createPlan(devnet.walletClient(provider), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: 1_000_000n,
    interval: 30n * 86_400n,
    includedUnits: 0n,
    overageUnitPrice: 0n,
  });
  planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
  const app = new Hono();
  app.use("/api/*", async (c, next) => {
    const result = await gate(c.req.raw);
    if (result.kind === "respond") return result.response;
    await next();
  });
  app.get("/api/report", (c) => c.json({ report: "quarterly" }));
  api = await serveApp(app);
  const client = createFacilitatorClient({ url: tf.url, fetch });
  gate = paymentGate({
    payTo: provider.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    fetch: countingFetch,
    clock,
    memoSecret: randomBytes(32),
    publicOrigin: api.url,
    providerApiKey: (await registerProvider(client, provider.account)).apiKey,
    subscriptionEventPollMs: 0,
    subscriptionStatusTtlMs: TTL_MS,
    routes: {
      "GET /api/report": {
        pricing: [
          { type: "one-time", amount: 10_000n },
          { type: "subscription", plan: planId },
        ],
      },
    },
  });
  await gate.ready();
});

afterAll(async () => {
  await gate?.close();
  await api?.close();
  await tf?.stop();
  await devnet?.stop();
});

describe("sub-auth tokens for subscriptions that do not exist", { timeout: 120_000 }, () => {
  it("costs no lookup and no signature recovery for a token that fails a free check (audience, subject, expiry, issue time, lifetime)", async () => {
    const stranger = privateKeyToAccount(generatePrivateKey());
    const now = Math.floor(clock.now() / 1000);
    lookups.clear();
    recoveries.count = 0;
    const refused = [
      await request("7001", await token(stranger, { sub: "7001", aud: "https://another.example" })),
      await request("7002", await token(stranger, { sub: "7099" })),
      await request("7003", await token(stranger, { sub: "7003", iat: now - 3000, exp: now - 10 })),
      await request("7004", await token(stranger, { sub: "7004", iat: now + 600, exp: now + 1200 })),
      await request(
        "7005",
        await token(stranger, { sub: "7005", iat: now - 30, exp: now + 10 * 365 * 86_400 }),
      ),
      await request("7006", "not-a-token"),
    ];
    expect(refused).toEqual([402, 402, 402, 402, 402, 402]);
    expect(totalLookups()).toBe(0);
    expect(recoveries.count).toBe(0);
  });

  it("costs at most one lookup per made-up id per TTL, however many requests and fresh tokens", async () => {
    const stranger = privateKeyToAccount(generatePrivateKey());
    lookups.clear();
    recoveries.count = 0;
    const ids = Array.from({ length: 8 }, (_, i) => String(8_000_000 + i));
    for (let round = 0; round < 6; round++) {
      // A fresh token each time (a new iat): caching tokens alone would not help.
      const statuses = await Promise.all(
        ids.map(async (id) =>
          request(id, await token(stranger, { sub: id, iat: Math.floor(clock.now() / 1000) - round - 1 })),
        ),
      );
      expect(statuses).toEqual(ids.map(() => 402));
    }
    expect(Object.fromEntries(lookups)).toEqual(Object.fromEntries(ids.map((id) => [id, 1])));
    // One recovery per token sent, none more: the stranger's tokens are not kept for later.
    expect(recoveries.count).toBe(ids.length * 6);

    clock.advance(TTL_MS + 1);
    for (const id of ids) await request(id, await token(stranger, { sub: id }));
    expect(Object.fromEntries(lookups)).toEqual(Object.fromEntries(ids.map((id) => [id, 2])));
  });

  it("keeps a real subscriber's state cached while a flood of made-up ids comes and goes", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 5_000_000n });
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url, fetch });
    const id = (await payer.subscribe({ planId, maxOverage: 0n })).toString();
    const own = await token(account, { sub: id });
    lookups.clear();
    expect(await request(id, own)).toBe(200);
    expect(lookups.get(id)).toBe(1);

    const stranger = privateKeyToAccount(generatePrivateKey());
    const flood = Array.from({ length: 40 }, (_, i) => String(9_000_000 + i));
    for (const junk of flood) expect(await request(junk, await token(stranger, { sub: junk }))).toBe(402);
    expect(await request(id, own)).toBe(200);
    expect(lookups.get(id)).toBe(1);
  });
});
