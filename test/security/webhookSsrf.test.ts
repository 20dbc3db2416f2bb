/**
 * Webhooks were once an SSRF. A provider registered any URL (loopback, the metadata
 * service at 169.254.169.254, private hosts), the facilitator POSTed to it from inside its network and
 * stored the reply's body in the delivery log (and its own log), where the provider could read it.
 *
 * Over a real devnet and real facilitators: registration refuses non-public targets in every spelling,
 * delivery checks again (DNS may change), connects to the address it checked (a second DNS answer
 * cannot redirect it), follows no redirect, and keeps only a status line of a response.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { createFacilitator, type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import {
  ListWebhookDeliveriesResponseSchema,
  type WebhookDelivery,
} from "../../src/facilitator/webhooks/webhookApi.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import { signTestPayment } from "../support/facilitatorHarness.ts";

/** A DNS the test controls: names it knows answer from `answers`, others from the real resolver. */
function createTestDns() {
  const answers = new Map<string, (call: number) => string[]>();
  const calls = new Map<string, number>();
  const lookup = async (hostname: string) => {
    const answer = answers.get(hostname);
    if (answer === undefined) {
      return (await dnsLookup(hostname, { all: true })).map((a) => ({
        address: a.address,
        family: a.family === 6 ? (6 as const) : (4 as const),
      }));
    }
    const call = (calls.get(hostname) ?? 0) + 1;
    calls.set(hostname, call);
    return answer(call).map((address) => ({ address, family: address.includes(":") ? 6 : 4 }) as const);
  };
  return { answers, calls, lookup };
}

type Running = {
  url: string;
  store: Store;
  logs: string[];
  stop(): Promise<void>;
};

let devnet: Devnet;
let payer: DevnetAccount;
const dns = createTestDns();
/** Default policy (nothing non-public allowed), with the test's DNS. */
let strict: Running;
/** Allows 127.0.0.2 only, as a development set-up would allow its own receiver. */
let dev: Running;
let strictKey: string;
let devKey: string;
const strictProvider = () => devnet.accounts[2]!;
const devProvider = () => devnet.accounts[3]!;

async function startFacilitator(gas: DevnetAccount, allowTargets: string[] | undefined): Promise<Running> {
  const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(String(chunk));
      done();
    },
  });
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
    logger: pino({ level: "debug" }, sink),
    webhooks: {
      lookup: dns.lookup,
      timeoutMs: 5_000,
      ...(allowTargets === undefined ? {} : { allowTargets }),
    },
  });
  await facilitator.start();
  const server: RunningServer = await serveApp(facilitator.app);
  return {
    url: server.url,
    store,
    logs,
    async stop() {
      await server.close();
      await facilitator.stop();
      await store.close();
    },
  };
}

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

async function registerProvider(base: string, account: DevnetAccount): Promise<string> {
  const challenge = await call(base, "POST", "/providers/challenge", { address: account.address });
  const text = challenge.body.challenge as string;
  const signature = await account.account.signMessage({ message: text });
  const registered = await call(base, "POST", "/providers", {
    address: account.address,
    challenge: text,
    signature,
  });
  expect(registered.status).toBe(201);
  return registered.body.apiKey as string;
}

async function pay(base: string, payTo: DevnetAccount): Promise<void> {
  const signedPayment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 1_000_000n });
  const response = await call(base, "POST", "/authorize", { signedPayment });
  expect(response.status).toBe(200);
}

/** An HTTP server on `host` (port 0 = any) recording every request; `handler` answers. */
async function listen(
  host: string,
  port: number,
  handler: (res: import("node:http").ServerResponse) => void = (res) => res.writeHead(204).end(),
) {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    req.resume();
    req.on("end", () => handler(res));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Two servers on one port: `public` on 127.0.0.2 (allowed in `dev`) and `internal` on 127.0.0.1. */
async function listenTwice(publicHandler?: (res: import("node:http").ServerResponse) => void) {
  for (let attempt = 0; ; attempt++) {
    const outside = await listen("127.0.0.2", 0, publicHandler);
    try {
      const internal = await listen("127.0.0.1", outside.port, (res) =>
        res
          .writeHead(200, { "content-type": "text/plain" })
          .end("INTERNAL-ADMIN-DATA aws_secret_access_key=AKIA"),
      );
      return { outside, internal };
    } catch (error) {
      await outside.close();
      if (attempt >= 5) throw error;
    }
  }
}

async function waitForAttempt(
  running: Running,
  apiKey: string,
  endpointId: string,
): Promise<WebhookDelivery> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const response = await call(running.url, "GET", `/webhooks/${endpointId}/deliveries`, undefined, apiKey);
    const [delivery] = ListWebhookDeliveriesResponseSchema.parse(response.body).deliveries;
    if (delivery !== undefined && delivery.history.length > 0) return delivery;
    if (Date.now() > deadline) throw new Error(`no delivery attempt: ${JSON.stringify(response.body)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 8 });
  payer = devnet.accounts[1]!;
  [strict, dev] = await Promise.all([
    startFacilitator(devnet.accounts[7]!, undefined),
    startFacilitator(devnet.accounts[6]!, ["127.0.0.2/32"]),
  ]);
  [strictKey, devKey] = await Promise.all([
    registerProvider(strict.url, strictProvider()),
    registerProvider(dev.url, devProvider()),
  ]);
});

afterAll(async () => {
  await strict?.stop();
  await dev?.stop();
  await devnet?.stop();
});

describe("webhook targets at registration", () => {
  const refused: [string, string][] = [
    ["loopback", "http://127.0.0.1:8080/hooks"],
    ["loopback by name", "http://localhost:8080/hooks"],
    ["loopback, short form", "http://127.1/"],
    ["loopback as a decimal number", "http://2130706433/"],
    ["loopback in hex", "http://0x7f.1/"],
    ["loopback in octal", "http://0177.0.0.1/"],
    ["the unspecified address", "http://0.0.0.0:8080/"],
    ["0.0.0.0/8", "http://0.1.2.3/"],
    ["the metadata service", "http://169.254.169.254/latest/meta-data/"],
    ["link-local", "http://169.254.1.1/"],
    ["10/8", "http://10.0.0.1/"],
    ["172.16/12", "http://172.31.255.254/"],
    ["192.168/16", "http://192.168.1.1/"],
    ["carrier-grade NAT", "http://100.64.0.1/"],
    ["IPv6 loopback", "http://[::1]:8080/"],
    ["the IPv6 unspecified address", "http://[::]/"],
    ["IPv6 unique local", "http://[fd00::1]/"],
    ["IPv6 fc00::/7", "http://[fc00::1]/"],
    ["IPv6 link-local", "http://[fe80::1]/"],
    ["IPv4-mapped loopback", "http://[::ffff:127.0.0.1]/"],
    ["IPv4-mapped metadata service", "http://[::ffff:169.254.169.254]/"],
    ["NAT64 of a private address", "http://[64:ff9b::a00:1]/"],
    ["a name resolving to a private address", "http://internal.test/hooks"],
    ["a name with one public and one loopback address", "http://mixed.test/hooks"],
  ];

  beforeAll(() => {
    dns.answers.set("internal.test", () => ["10.1.2.3"]);
    dns.answers.set("mixed.test", () => ["93.184.215.14", "127.0.0.1"]);
    dns.answers.set("public.test", () => ["93.184.215.14"]);
  });

  it.each(refused)("refuses %s (%s) with a 400 naming the reason", async (_what, url) => {
    const response = await call(strict.url, "POST", "/webhooks", { url }, strictKey);
    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({ error: { code: "InvalidRequest" } });
    const error = response.body.error as { message: string; details?: { reason?: string } };
    expect(error.details?.reason).toBe("private_address");
    expect(error.message).toMatch(/loopback, link-local, private or reserved/);
  });

  it.each([
    ["credentials", "https://user:pw@public.test/hooks"],
    ["a non-http scheme", "gopher://public.test/"],
    ["a file URL", "file:///etc/passwd"],
  ])("refuses a URL with %s", async (_what, url) => {
    const response = await call(strict.url, "POST", "/webhooks", { url }, strictKey);
    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({ error: { code: "InvalidRequest" } });
  });

  it("accepts a name that resolves to public addresses only", async () => {
    const response = await call(
      strict.url,
      "POST",
      "/webhooks",
      { url: "https://public.test/hooks" },
      strictKey,
    );
    expect(response.status).toBe(201);
    await call(strict.url, "DELETE", `/webhooks/${response.body.id as string}`, undefined, strictKey);
  });
});

describe("webhook targets at delivery", () => {
  it("checks the target again when it delivers: a name that now resolves to loopback gets nothing", async () => {
    const internal = await listen("127.0.0.1", 0);
    try {
      let rebound = false;
      dns.answers.set("rebind.test", () => [rebound ? "127.0.0.1" : "93.184.215.14"]);
      const created = await call(
        strict.url,
        "POST",
        "/webhooks",
        { url: `http://rebind.test:${internal.port}/hooks`, events: ["payment.settled"] },
        strictKey,
      );
      expect(created.status).toBe(201);
      rebound = true;
      await pay(strict.url, strictProvider());
      const delivery = await waitForAttempt(strict, strictKey, created.body.id as string);
      expect(delivery.history[0]).toMatchObject({ statusCode: null });
      expect(delivery.history[0]?.error).toMatch(/refused: private_address/);
      expect(internal.requests).toEqual([]);
      await call(strict.url, "DELETE", `/webhooks/${created.body.id as string}`, undefined, strictKey);
    } finally {
      await internal.close();
    }
  });

  it("connects to the address it checked, not to a second DNS answer for the same name", async () => {
    const { outside, internal } = await listenTwice();
    try {
      // Every lookup after the registration's and the delivery check's answers loopback: a transport
      // that resolved the name again to connect would reach the internal server.
      dns.answers.set("flip.test", (n) => [n <= 2 ? "127.0.0.2" : "127.0.0.1"]);
      const created = await call(
        dev.url,
        "POST",
        "/webhooks",
        { url: `http://flip.test:${outside.port}/hooks`, events: ["payment.settled"] },
        devKey,
      );
      expect(created.status).toBe(201);
      await pay(dev.url, devProvider());
      const delivery = await waitForAttempt(dev, devKey, created.body.id as string);
      expect(delivery.history[0]).toMatchObject({ statusCode: 204, error: null });
      expect(outside.requests).toEqual(["POST /hooks"]);
      expect(internal.requests).toEqual([]);
      await call(dev.url, "DELETE", `/webhooks/${created.body.id as string}`, undefined, devKey);
    } finally {
      await outside.close();
      await internal.close();
    }
  });

  it("does not follow a redirect to an internal address", async () => {
    const internal = await listen("127.0.0.1", 0);
    const redirecting = await listen("127.0.0.2", 0, (res) =>
      res.writeHead(302, { location: `http://127.0.0.1:${internal.port}/admin` }).end(),
    );
    try {
      const created = await call(
        dev.url,
        "POST",
        "/webhooks",
        { url: `http://127.0.0.2:${redirecting.port}/hooks`, events: ["payment.settled"] },
        devKey,
      );
      expect(created.status).toBe(201);
      await pay(dev.url, devProvider());
      const delivery = await waitForAttempt(dev, devKey, created.body.id as string);
      expect(delivery.history[0]).toMatchObject({ statusCode: 302, error: "HTTP 302 Found" });
      expect(internal.requests).toEqual([]);
      await call(dev.url, "DELETE", `/webhooks/${created.body.id as string}`, undefined, devKey);
    } finally {
      await redirecting.close();
      await internal.close();
    }
  });

  it("keeps a short status line of a failed delivery, never the response body, in the delivery log and the logs", async () => {
    const marker = "INTERNAL-ADMIN-DATA aws_secret_access_key=AKIA";
    const leaky = await listen("127.0.0.2", 0, (res) =>
      res
        .writeHead(500, `Oops ${"x".repeat(300)}`, { "content-type": "text/plain" })
        .end(`${marker} ${"y".repeat(1000)}`),
    );
    try {
      const created = await call(
        dev.url,
        "POST",
        "/webhooks",
        { url: `http://127.0.0.2:${leaky.port}/hooks`, events: ["payment.settled"] },
        devKey,
      );
      expect(created.status).toBe(201);
      await pay(dev.url, devProvider());
      const delivery = await waitForAttempt(dev, devKey, created.body.id as string);
      const error = delivery.history[0]?.error ?? "";
      expect(delivery.history[0]?.statusCode).toBe(500);
      expect(error.startsWith("HTTP 500 Oops x")).toBe(true);
      expect(error.length).toBeLessThanOrEqual(100);
      expect(JSON.stringify(delivery)).not.toContain("INTERNAL-ADMIN-DATA");
      // The facilitator's own log of the failed attempt holds the status line, not the body.
      expect(dev.logs.some((line) => line.includes("webhook delivery failed"))).toBe(true);
      expect(dev.logs.join("\n")).not.toContain("INTERNAL-ADMIN-DATA");
      const stored = await dev.store.query<{ last_error: string | null }>(
        "SELECT last_error FROM webhook_deliveries WHERE endpoint_id = $1",
        [created.body.id as string],
      );
      expect(JSON.stringify(stored)).not.toContain("INTERNAL-ADMIN-DATA");
      await call(dev.url, "DELETE", `/webhooks/${created.body.id as string}`, undefined, devKey);
    } finally {
      await leaky.close();
    }
  });
});
