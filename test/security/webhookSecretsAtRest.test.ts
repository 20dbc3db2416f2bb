/**
 * Webhook secrets at rest: PGlite's WAL once held every webhook signing secret in plain text, so a
 * copy of `.tollgate/` (or of a PostgreSQL backup) was enough to forge deliveries to every provider.
 * Secrets are now sealed (AES-256-GCM) under a key kept outside the database before they are written;
 * the facilitator still signs with them.
 *
 * A real facilitator over a devnet registers and rotates endpoints on an on-disk PGlite store; then
 * every byte of the data directory (tables, WAL, everything) is searched for the secrets. With
 * `DATABASE_URL` set the same facilitator also runs on PostgreSQL, whose files the test cannot read:
 * there the stored columns are checked.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createFacilitator, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { verifyWebhook } from "../../src/gate/verifyWebhook.ts";
import { systemClock } from "../../src/protocol/clock.ts";
import { createStore } from "../../src/store/createStore.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import { signTestPayment } from "../support/facilitatorHarness.ts";

let devnet: Devnet;
let root: string;
/** The sealing key, as an operator configures it (TOLLGATE_WEBHOOK_KEYS); never in the database. */
const sealingKey = new Uint8Array(32).fill(42);

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  root = await mkdtemp(join(tmpdir(), "tollgate-secrets-"));
});

afterAll(async () => {
  await devnet?.stop();
  await rm(root, { recursive: true, force: true });
});

async function call(base: string, method: string, path: string, body?: unknown, apiKey?: string) {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;
  const response = await fetch(`${base}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/**
 * Runs a facilitator on `store`: registers a provider, an endpoint on a local receiver, rotates its
 * secret, and has one payment delivered and verified with the issued secrets. Returns every secret
 * the facilitator issued.
 */
async function issueSecrets(store: Store, gas: DevnetAccount, provider: DevnetAccount): Promise<string[]> {
  const facilitator = createFacilitator({
    store,
    publicClient: devnet.publicClient,
    network: devnet.network,
    gasAccount: gas.account,
    proofKeys: [generateProofKey().key],
    batchSettler: devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    tokens: [
      {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
        symbol: "USDC",
        decimals: 6,
      },
    ],
    webhooks: { secretKeys: [sealingKey], allowTargets: ["127.0.0.0/8"] },
  });
  await facilitator.start();
  const server = await serveApp(facilitator.app);
  const secrets: string[] = [];
  const verified: string[] = [];
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      try {
        // Signed with the current secret (the rotated-out one still in its grace period too).
        verified.push(
          verifyWebhook(secrets.at(-1)!, req.headers, Buffer.concat(chunks), { clock: systemClock }).type,
        );
        res.writeHead(204).end();
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  try {
    const challenge = await call(server.url, "POST", "/providers/challenge", { address: provider.address });
    const text = challenge.body.challenge as string;
    const registered = await call(server.url, "POST", "/providers", {
      address: provider.address,
      challenge: text,
      signature: await provider.account.signMessage({ message: text }),
    });
    expect(registered.status).toBe(201);
    const apiKey = registered.body.apiKey as string;
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
    const created = await call(server.url, "POST", "/webhooks", { url, events: ["payment.settled"] }, apiKey);
    expect(created.status).toBe(201);
    secrets.push(created.body.secret as string);
    const rotated = await call(
      server.url,
      "POST",
      `/webhooks/${created.body.id as string}/rotate-secret`,
      { graceSeconds: 3600 },
      apiKey,
    );
    expect(rotated.status).toBe(200);
    secrets.push(rotated.body.secret as string);

    const signedPayment = await signTestPayment(devnet, devnet.accounts[1]!, {
      payTo: provider.address,
      amount: 1_000_000n,
    });
    expect((await call(server.url, "POST", "/authorize", { signedPayment })).status).toBe(200);
    const deadline = Date.now() + 20_000;
    while (verified.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    // The sealed secret still signs: the delivery verified with the secret the provider was given.
    expect(verified).toEqual(["payment.settled"]);
  } finally {
    await new Promise<void>((resolve) => receiver.close(() => resolve()));
    await server.close();
    await facilitator.stop();
  }
  return secrets;
}

/** Every file below `dir`, read whole. */
function allBytes(dir: string): { path: string; bytes: Buffer }[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? allBytes(path) : [{ path, bytes: readFileSync(path) }];
  });
}

describe("webhook secrets at rest", () => {
  it("leaves no webhook secret in plain text anywhere in a PGlite data directory, WAL included", async () => {
    const dataDir = join(root, ".tollgate", "pglite");
    const store = await createStore({ dataDir });
    let secrets: string[];
    try {
      secrets = await issueSecrets(store, devnet.accounts[5]!, devnet.accounts[2]!);
    } finally {
      await store.close();
    }
    expect(secrets).toHaveLength(2);
    const files = allBytes(dataDir);
    expect(files.some((f) => f.path.includes("pg_wal"))).toBe(true);
    for (const secret of secrets) {
      // The whole secret, and its random part alone (as it would appear in any encoding of the text).
      for (const needle of [secret, secret.slice("whsec_".length)]) {
        const found = files.filter((f) => f.bytes.includes(needle)).map((f) => f.path);
        expect(found).toEqual([]);
      }
    }
  }, 120_000);

  it.runIf(process.env.DATABASE_URL !== undefined)("stores only sealed secrets on PostgreSQL", async () => {
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    try {
      const secrets = await issueSecrets(store, devnet.accounts[4]!, devnet.accounts[3]!);
      const rows = await store.query<{ secret: string; previous_secret: string | null }>(
        "SELECT secret, previous_secret FROM webhook_endpoints",
      );
      expect(rows).toHaveLength(1);
      const stored = JSON.stringify(rows);
      for (const secret of secrets) expect(stored).not.toContain(secret.slice("whsec_".length));
      expect(rows[0]!.secret).toMatch(/^tgs1\./);
      expect(rows[0]!.previous_secret).toMatch(/^tgs1\./);
    } finally {
      await store.close();
    }
  });
});
