/**
 * What a stranger could make the facilitator do or reveal, over a real facilitator on a real devnet:
 * - a stranger evicted a provider's pending registration challenge by asking for five more in the
 *   provider's name (challenges are public to ask for: an address is not a secret);
 * - `GET /metrics` showed settled volume to anyone who could reach the port.
 */
import { networkInterfaces } from "node:os";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../../src/chain/startDevnet.ts";
import { createFacilitator, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import {
  ProviderChallengeResponseSchema,
  ProviderRegisterResponseSchema,
} from "../../src/protocol/subscriptions.ts";
import {
  signTestPayment,
  startTestFacilitator,
  type TestFacilitator,
} from "../support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  // Settle one payment so the metrics carry a volume worth hiding.
  const payment = await signTestPayment(devnet, devnet.accounts[1]!, {
    payTo: devnet.accounts[2]!.address,
    amount: 30_000n,
  });
  const settled = await fetch(`${tf.url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment: payment }),
  });
  expect(settled.status).toBe(200);
}, 120_000);

afterAll(async () => {
  await tf?.stop();
  await devnet?.stop();
});

function post(path: string, body: unknown) {
  return fetch(`${tf.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function challengeFor(address: string): Promise<string> {
  const response = await post("/providers/challenge", { address });
  expect(response.status).toBe(200);
  return ProviderChallengeResponseSchema.parse(await response.json()).challenge;
}

describe("provider registration challenges", () => {
  it("lets a provider register with its challenge after a stranger asked for many more in its name", async () => {
    const provider = privateKeyToAccount(generatePrivateKey());
    const challenge = await challengeFor(provider.address);
    // The stranger needs no key to do this: only the provider's (public) address.
    for (let i = 0; i < 12; i++) await challengeFor(provider.address);
    const signature = await provider.signMessage({ message: challenge });
    const response = await post("/providers", { address: provider.address, challenge, signature });
    expect(response.status).toBe(201);
    expect(ProviderRegisterResponseSchema.parse(await response.json()).provider).toBe(provider.address);
    // Still single-use.
    const again = await post("/providers", { address: provider.address, challenge, signature });
    expect(again.status).toBe(401);
  });
});

/** An address of this machine that is not loopback, to reach a server as a remote peer would. */
function externalIPv4(): string | undefined {
  for (const entries of Object.values(networkInterfaces())) {
    for (const entry of entries ?? []) if (entry.family === "IPv4" && !entry.internal) return entry.address;
  }
  return undefined;
}

describe("GET /metrics", () => {
  it("answers a scraper on the loopback interface with no configuration", async () => {
    const response = await fetch(`${tf.url}/metrics`);
    expect(response.status).toBe(200);
    expect(await response.text()).toMatch(/tollgate_payments_settled_volume\{token="0x[0-9a-f]{40}"\} [1-9]/);
  });

  it("refuses a request a reverse proxy relayed, although the proxy's socket is local", async () => {
    for (const header of ["x-forwarded-for", "forwarded", "x-real-ip"]) {
      const response = await fetch(`${tf.url}/metrics`, { headers: { [header]: "203.0.113.9" } });
      expect(response.status).toBe(401);
      expect(await response.text()).not.toContain("tollgate_payments_settled_volume");
    }
  });

  const external = externalIPv4();
  it.runIf(external !== undefined)("refuses a peer that is not on the loopback interface", async () => {
    const server = await serveApp(tf.facilitator.app, { hostname: "0.0.0.0" });
    try {
      const response = await fetch(`http://${external}:${server.port}/metrics`);
      expect(response.status).toBe(401);
      expect(await response.json()).toMatchObject({ error: { code: "Unauthorized" } });
      // The same server still answers the rest of the API to that peer.
      expect((await fetch(`http://${external}:${server.port}/supported`)).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it("refuses a peer whose address the server cannot tell (no socket), failing closed", async () => {
    const remote = { incoming: { socket: { remoteAddress: "198.51.100.7" } } };
    expect((await tf.facilitator.app.request("/metrics", {}, remote)).status).toBe(401);
    expect((await tf.facilitator.app.request("/metrics")).status).toBe(401);
  });

  it("with a metrics token, answers only requests that carry it, loopback included", async () => {
    const token = "metrics-token-for-this-test-0123456789";
    const withToken = createFacilitator({
      store: tf.store,
      publicClient: devnet.publicClient,
      network: devnet.network,
      gasAccount: devnet.accounts[3]!.account,
      proofKeys: [generateProofKey().key],
      batchSettler: devnet.contracts.batchSettler,
      tokens: [
        {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
          symbol: "USDC",
          decimals: 6,
        },
      ],
      builtinModules: false,
      metricsAccess: { token },
    });
    const server = await serveApp(withToken.app);
    try {
      expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
      const wrong = await fetch(`${server.url}/metrics`, { headers: { authorization: "Bearer nope" } });
      expect(wrong.status).toBe(401);
      const right = await fetch(`${server.url}/metrics`, {
        headers: { authorization: `Bearer ${token}`, "x-forwarded-for": "203.0.113.9" },
      });
      expect(right.status).toBe(200);
    } finally {
      await server.close();
    }
  });
});
