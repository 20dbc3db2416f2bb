/**
 * Request targets: the adapters once priced a path built from the `Host` header and the raw request
 * target, not the path their framework routes on. `Host: x/y?` made the Express gate see another path
 * (a 0.50 report served for nothing), `Host: <host>/api/cheap?` made it quote the cheap route's price
 * for the expensive handler, and `nodePaymentGate` let absolute-form targets and dot segments past its
 * prefix check.
 *
 * Every adapter runs on a real socket and is sent raw HTTP/1.1 (node:net): forged `Host` values,
 * absolute-form targets, dot segments, percent-encoded segments. Whatever comes back, a paid handler
 * must never run without a payment of at least its own route's price; a 402 that is answered must
 * quote that price and be payable only for that.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import express from "express";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jwksOf, proofKeyFromSeed } from "../../src/facilitator/proofKeys.ts";
import { expressPaymentGate } from "../../src/gate/expressPaymentGate.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { nodePaymentGate } from "../../src/gate/nodePaymentGate.ts";
import { type GatePayment, paymentGate } from "../../src/gate/paymentGate.ts";
import { createFixedClock, unixSeconds } from "../../src/protocol/clock.ts";
import { encodeJsonHeader } from "../../src/protocol/header.ts";
import { PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { type RawResponse, rawRequest } from "../support/rawHttp.ts";
import { signProofFor } from "../support/signProofFor.ts";

const PUBLIC_ORIGIN = "https://api.example.com";
const PRICES = { report: 500_000n, cheap: 10_000n } as const;
type Handler = keyof typeof PRICES;

const key = proofKeyFromSeed(new Uint8Array(32).fill(11));
const clock = createFixedClock(1_763_800_000_000);

function newGate() {
  return paymentGate({
    payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    network: "eip155:31337",
    token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
    facilitator: "http://facilitator.test",
    fetch: async () => {
      throw new Error("this suite reaches no facilitator");
    },
    memoSecret: "gate-request-target-suite-secret-of-plenty-of-bytes",
    publicOrigin: PUBLIC_ORIGIN,
    clock,
    proofKeys: jwksOf([key]),
    routes: {
      "GET /api/reports/:id": { amount: PRICES.report },
      "GET /api/cheap": { amount: PRICES.cheap },
    },
  });
}

type Served = { handler: Handler; payment: GatePayment | undefined };

type Adapter = { name: string; port: number; served: Served[]; close(): Promise<void> };

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

function closer(server: Server) {
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
}

async function startHono(): Promise<Adapter> {
  const served: Served[] = [];
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(newGate()));
  app.get("/api/reports/:id", (c) => {
    served.push({ handler: "report", payment: c.get("payment") });
    return c.json({ report: c.req.param("id") });
  });
  app.get("/api/cheap", (c) => {
    served.push({ handler: "cheap", payment: c.get("payment") });
    return c.json({ cheap: true });
  });
  const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }) as Server;
  await new Promise<void>((resolve) => (server.listening ? resolve() : server.once("listening", resolve)));
  return { name: "hono", port: (server.address() as AddressInfo).port, served, close: closer(server) };
}

async function startExpress(): Promise<Adapter> {
  const served: Served[] = [];
  const app = express();
  app.use("/api", expressPaymentGate(newGate()));
  app.get("/api/reports/:id", (req, res) => {
    served.push({ handler: "report", payment: res.locals.payment });
    res.json({ report: req.params.id });
  });
  app.get("/api/cheap", (_req, res) => {
    served.push({ handler: "cheap", payment: res.locals.payment });
    res.json({ cheap: true });
  });
  const server = createServer(app);
  return { name: "express", port: await listen(server), served, close: closer(server) };
}

/**
 * A `node:http` handler routing as handlers commonly do: on the WHATWG-parsed path, decoded, in any
 * letter case.
 */
async function startNode(): Promise<Adapter> {
  const served: Served[] = [];
  const server = createServer(
    nodePaymentGate(
      newGate(),
      (req, res, payment) => {
        let path: string;
        try {
          path = decodeURIComponent(new URL(req.url ?? "/", "http://localhost").pathname).toLowerCase();
        } catch {
          res.writeHead(400).end();
          return;
        }
        let handler: Handler | undefined;
        if (/^\/api\/reports\/[^/]+$/.test(path)) handler = "report";
        else if (path === "/api/cheap") handler = "cheap";
        if (handler === undefined) {
          res.writeHead(404).end();
          return;
        }
        served.push({ handler, payment });
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ handler }));
      },
      { prefix: "/api" },
    ),
  );
  return { name: "node:http", port: await listen(server), served, close: closer(server) };
}

const adapters: Adapter[] = [];
beforeAll(async () => {
  adapters.push(await startHono(), await startExpress(), await startNode());
});
afterAll(async () => {
  await Promise.all(adapters.map((adapter) => adapter.close()));
});

/** `<host>` in an attack is the server's own `127.0.0.1:<port>`. */
type Attack = { target: string; host?: string };

const attacks: [string, Attack][] = [
  ["Host: x/y? (the gate once saw the path /y)", { target: "/api/reports/1", host: "x/y?" }],
  ["Host: a# (the gate once saw the path /)", { target: "/api/reports/1", host: "a#" }],
  [
    "Host: <host>/api/cheap? (the cheap route's price)",
    { target: "/api/reports/1", host: "<host>/api/cheap?" },
  ],
  ["Host: <host>/api/cheap# ", { target: "/api/reports/1", host: "<host>/api/cheap#" }],
  ["an absolute-form target", { target: "http://<host>/api/reports/1" }],
  ["an absolute-form target naming another host", { target: "http://cheap.example/api/reports/1" }],
  ["an absolute-form target and Host: x/y?", { target: "http://<host>/api/reports/1", host: "x/y?" }],
  ["dot segments into the prefix", { target: "/x/../api/reports/1" }],
  ["dot segments from the cheap route", { target: "/api/cheap/../reports/1" }],
  ["percent-encoded dot segments", { target: "/x/%2e%2e/api/reports/1" }],
  ["a dot-dot id", { target: "/api/reports/.." }],
  ["a percent-encoded dot-dot id", { target: "/api/reports/%2E%2e" }],
  ["a percent-encoded letter", { target: "/api/r%65ports/1" }],
  ["a percent-encoded prefix", { target: "/%61pi/reports/1" }],
  ["an upper-case prefix", { target: "/API/reports/1" }],
  ["encoded slashes", { target: "/api%2Freports%2F1" }],
  ["a fragment", { target: "/api/reports/1#x" }],
  ["a double slash", { target: "//api/reports/1" }],
];

/** Sends an attack unpaid; when it gets a 402, pays its first offer and sends the same bytes again. */
async function attack(adapter: Adapter, { target, host }: Attack): Promise<RawResponse[]> {
  const own = `127.0.0.1:${adapter.port}`;
  const request = {
    target: target.replaceAll("<host>", own),
    host: (host ?? "<host>").replaceAll("<host>", own),
  };
  const unpaid = await rawRequest(adapter.port, request);
  if (unpaid.status !== 402) return [unpaid];
  const offer = PaymentRequiredSchema.parse(JSON.parse(unpaid.body));
  const proof = signProofFor(key, offer.accepts[0]!, unixSeconds(clock));
  const paid = await rawRequest(adapter.port, {
    ...request,
    headers: { "X-PAYMENT": encodeJsonHeader(proof) },
  });
  return [unpaid, paid];
}

describe.each(["hono", "express", "node:http"])("%s adapter, attacked over raw HTTP", (name) => {
  const adapter = () => adapters.find((a) => a.name === name) as Adapter;

  it.each(attacks)("never runs a paid handler for less than its route's price: %s", async (_label, how) => {
    const { served } = adapter();
    served.length = 0;
    const responses = await attack(adapter(), how);
    for (const response of responses) expect(response.status, response.body).toBeLessThan(500);
    for (const { handler, payment } of served) {
      expect(payment, `${handler} ran unpaid`).toBeDefined();
      expect(payment?.amount, `${handler} ran for a cheaper payment`).toBeGreaterThanOrEqual(PRICES[handler]);
    }
  });

  it("quotes the report's own price, whatever Host says, and names the configured origin, not Host", async () => {
    const { port } = adapter();
    for (const host of [`127.0.0.1:${port}`, `127.0.0.1:${port}/api/cheap?`, "evil.example"]) {
      const response = await rawRequest(port, { target: "/api/reports/7?v=1", host });
      if (host.includes("/")) {
        // Hono's server refuses such a Host itself; the others must not let it change anything.
        expect([400, 402]).toContain(response.status);
        if (response.status === 400) continue;
      }
      expect(response.status).toBe(402);
      const offer = PaymentRequiredSchema.parse(JSON.parse(response.body));
      expect(offer.accepts.map((option) => option.amount)).toEqual([PRICES.report.toString()]);
      expect(offer.accepts[0]?.resource).toBe(`${PUBLIC_ORIGIN}/api/reports/7?v=1`);
      const x402 = decodePaymentRequiredHeader(response.headers["payment-required"] ?? "");
      expect(x402.resource.url).toBe(`${PUBLIC_ORIGIN}/api/reports/7?v=1`);
    }
  });

  it("still serves a normal paid request, so the refusals above are not the whole story", async () => {
    const { served, port } = adapter();
    served.length = 0;
    const responses = await attack(adapter(), { target: "/api/reports/1" });
    expect(responses.map((response) => response.status)).toEqual([402, 200]);
    expect(served).toEqual([
      { handler: "report", payment: expect.objectContaining({ amount: PRICES.report }) },
    ]);
    expect(port).toBeGreaterThan(0);
  });
});
