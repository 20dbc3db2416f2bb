import { Hono } from "hono";
import pino from "pino";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorResponse } from "../../http/httpErrors.ts";
import { createFixedClock } from "../../protocol/clock.ts";
import {
  ProviderAccountSchema,
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
} from "../../protocol/subscriptions.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import type { FacilitatorContext } from "../facilitatorContext.ts";
import { createProvidersModule } from "./providersModule.ts";
import { findProviderByApiKey, requireProvider } from "./requireProvider.ts";

let store: Store;
const clock = createFixedClock(1_763_800_000_000);
let app: Hono;

/** EOAs only: a contract-wallet lookup would be a bug here, so the chain is absent. */
const noChain = {
  getCode: () => Promise.reject(new Error("no chain in this test")),
  verifyMessage: () => Promise.reject(new Error("no chain in this test")),
};

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  const ctx = {
    store,
    clock,
    network: "eip155:31337",
    logger: pino({ level: "silent" }),
    publicClient: noChain,
  } as unknown as FacilitatorContext;
  app = new Hono();
  app.onError((error) => errorResponse(error));
  createProvidersModule({ challengeTtlSeconds: 60, maxActiveKeys: 2 })(ctx).routes?.(app);
  app.get("/whoami", requireProvider(ctx), (c) => c.json({ address: c.get("provider").address }));
});

afterAll(async () => {
  await store?.close();
});

function post(path: string, body: unknown) {
  return app.request(path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function codeOf(response: Response): Promise<string> {
  return ((await response.json()) as { error: { code: string } }).error.code;
}

async function challengeFor(address: string) {
  const response = await post("/providers/challenge", { address });
  expect(response.status).toBe(200);
  return ProviderChallengeResponseSchema.parse(await response.json());
}

async function register(account = privateKeyToAccount(generatePrivateKey())) {
  const { challenge } = await challengeFor(account.address);
  const signature = await account.signMessage({ message: challenge });
  const response = await post("/providers", { address: account.address, challenge, signature });
  return { response, account, challenge, signature };
}

describe("provider registration", () => {
  it("issues an API key to the signer of a challenge, and the key authenticates as that address", async () => {
    const { response, account } = await register();
    expect(response.status).toBe(201);
    const body = ProviderRegisterResponseSchema.parse(await response.json());
    expect(body.provider).toBe(account.address);
    const me = await app.request("/whoami", { headers: { authorization: `Bearer ${body.apiKey}` } });
    expect(me.status).toBe(200);
    expect(await me.json()).toEqual({ address: account.address });
    expect(await findProviderByApiKey(store, body.apiKey)).toMatchObject({ address: account.address });
  });

  it("stores only a hash of the key", async () => {
    const { response } = await register();
    const { apiKey } = ProviderRegisterResponseSchema.parse(await response.json());
    const rows = await store.query<{ t: string }>(
      "SELECT row_to_json(k)::text AS t FROM provider_api_keys k",
    );
    expect(rows.length).toBeGreaterThan(0);
    for (const row of rows) expect(row.t).not.toContain(apiKey.slice(8));
  });

  it("refuses a signature by another key", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const stranger = privateKeyToAccount(generatePrivateKey());
    const { challenge } = await challengeFor(account.address);
    const signature = await stranger.signMessage({ message: challenge });
    const response = await post("/providers", { address: account.address, challenge, signature });
    expect(response.status).toBe(422);
    expect(await codeOf(response)).toBe("InvalidSignature");
  });

  it("refuses a challenge used twice", async () => {
    const first = await register();
    expect(first.response.status).toBe(201);
    const again = await post("/providers", {
      address: first.account.address,
      challenge: first.challenge,
      signature: first.signature,
    });
    expect(again.status).toBe(401);
    expect(await codeOf(again)).toBe("Unauthorized");
  });

  it("refuses a challenge issued for another address", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const other = privateKeyToAccount(generatePrivateKey());
    const { challenge } = await challengeFor(other.address);
    const signature = await account.signMessage({ message: challenge });
    const response = await post("/providers", { address: account.address, challenge, signature });
    expect(response.status).toBe(401);
  });

  it("refuses an expired challenge", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { challenge } = await challengeFor(account.address);
    const signature = await account.signMessage({ message: challenge });
    clock.advance(61_000);
    const response = await post("/providers", { address: account.address, challenge, signature });
    expect(response.status).toBe(401);
  });

  it("keeps a provider's challenge valid however many more are requested in its name", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { challenge } = await challengeFor(account.address);
    for (let i = 0; i < 20; i++) await challengeFor(account.address);
    const signature = await account.signMessage({ message: challenge });
    const response = await post("/providers", { address: account.address, challenge, signature });
    expect(response.status).toBe(201);
  });

  it("refuses a challenge text it did not seal, even one signed by the address", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const { challenge } = await challengeFor(account.address);
    const forgeries = [
      // Another nonce (an unsealed one, or a tag for other fields).
      challenge.replace(/Nonce: [^.]+/, "Nonce: AAAAAAAAAAAAAAAAAAAAAA"),
      // A later expiry than the one sealed.
      challenge.replace(/Expires: .*$/, `Expires: ${new Date(clock.now() + 50_000).toISOString()}`),
      // Another network.
      challenge.replace("Network: eip155:31337", "Network: eip155:8453"),
      `${challenge}\n`,
    ];
    for (const forged of forgeries) {
      expect(forged).not.toBe(challenge);
      const signature = await account.signMessage({ message: forged });
      const response = await post("/providers", { address: account.address, challenge: forged, signature });
      expect(response.status).toBe(401);
    }
  });

  it("refuses missing, malformed and unknown keys with 401", async () => {
    for (const headers of [
      {},
      { authorization: "Basic abc" },
      { authorization: "Bearer nope" },
      { authorization: `Bearer tg_${"A".repeat(32)}` },
    ]) {
      const response = await app.request("/whoami", { headers });
      expect(response.status).toBe(401);
      expect(await codeOf(response)).toBe("Unauthorized");
    }
  });

  it("keeps earlier keys when registering again, up to the limit, and revokes a key on request", async () => {
    const account = privateKeyToAccount(generatePrivateKey());
    const a = ProviderRegisterResponseSchema.parse(await (await register(account)).response.json());
    const b = ProviderRegisterResponseSchema.parse(await (await register(account)).response.json());
    const third = await register(account);
    expect(third.response.status).toBe(400);

    const list = await app.request("/providers/me", { headers: { authorization: `Bearer ${a.apiKey}` } });
    expect(ProviderAccountSchema.parse(await list.json()).keys.map((k) => k.id)).toEqual([
      a.key.id,
      b.key.id,
    ]);

    const revoke = await app.request(`/providers/keys/${a.key.id}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${b.apiKey}` },
    });
    expect(revoke.status).toBe(200);
    const old = await app.request("/whoami", { headers: { authorization: `Bearer ${a.apiKey}` } });
    expect(old.status).toBe(401);
    const current = await app.request("/whoami", { headers: { authorization: `Bearer ${b.apiKey}` } });
    expect(current.status).toBe(200);
  });

  it("does not let a provider revoke another provider's key", async () => {
    const a = ProviderRegisterResponseSchema.parse(await (await register()).response.json());
    const b = ProviderRegisterResponseSchema.parse(await (await register()).response.json());
    const response = await app.request(`/providers/keys/${a.key.id}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${b.apiKey}` },
    });
    expect(response.status).toBe(404);
  });

  it("answers malformed bodies with 400, never 500", async () => {
    for (const body of [
      {},
      { address: "0x12" },
      { address: 5 },
      "text",
      { address: "0x".padEnd(42, "0"), x: 1 },
    ]) {
      const response = await post("/providers/challenge", body);
      expect(response.status).toBe(400);
    }
    const response = await post("/providers", {
      address: "0x".padEnd(42, "1"),
      challenge: "x",
      signature: "0x",
    });
    expect(response.status).toBe(400);
  });
});
