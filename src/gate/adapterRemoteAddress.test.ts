import { createServer, request as httpRequest, type RequestListener } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { serveApp } from "../facilitator/createFacilitator.ts";
import { expressPaymentGate } from "./expressPaymentGate.ts";
import type { GateRequest } from "./gateRequest.ts";
import { honoPaymentGate } from "./honoPaymentGate.ts";
import { nodePaymentGate } from "./nodePaymentGate.ts";
import type { PaymentGate } from "./paymentGate.ts";

/** A gate that records what it was asked and answers 402. */
function recordingGate(): { gate: PaymentGate; seen: GateRequest[] } {
  const seen: GateRequest[] = [];
  const gate = (async (request: GateRequest) => {
    seen.push(request);
    return { kind: "respond", response: new Response(null, { status: 402 }) };
  }) as PaymentGate;
  return { gate, seen };
}

/** GET `url` from 127.0.0.4 (a loopback alias), claiming another client in X-Forwarded-For. */
const getFrom = (url: string) =>
  new Promise<number>((resolve, reject) => {
    const request = httpRequest(
      url,
      { localAddress: "127.0.0.4", agent: false, headers: { "x-forwarded-for": "6.6.6.6" } },
      (response) => {
        response.resume();
        response.on("end", () => resolve(response.statusCode ?? 0));
      },
    );
    request.on("error", reject);
    request.end();
  });

async function servedOnNode(listener: RequestListener) {
  const server = createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe("the adapters pass the socket's peer, never a header, as GateRequest.remoteAddress", () => {
  it("Hono on @hono/node-server", async () => {
    const { gate, seen } = recordingGate();
    const app = new Hono();
    app.use("/api/*", honoPaymentGate(gate));
    const api = await serveApp(app);
    try {
      expect(await getFrom(`${api.url}/api/x`)).toBe(402);
    } finally {
      await api.close();
    }
    expect(seen.map((r) => r.remoteAddress)).toEqual(["127.0.0.4"]);
  });

  it("Express", async () => {
    const { gate, seen } = recordingGate();
    const app = express();
    app.set("trust proxy", true);
    app.use("/api", expressPaymentGate(gate));
    const api = await servedOnNode(app);
    try {
      expect(await getFrom(`${api.url}/api/x`)).toBe(402);
    } finally {
      await api.close();
    }
    expect(seen.map((r) => r.remoteAddress)).toEqual(["127.0.0.4"]);
  });

  it("node:http", async () => {
    const { gate, seen } = recordingGate();
    const api = await servedOnNode(
      nodePaymentGate(
        gate,
        (_req, res) => {
          res.end();
        },
        { prefix: "/api/" },
      ),
    );
    try {
      expect(await getFrom(`${api.url}/api/x`)).toBe(402);
    } finally {
      await api.close();
    }
    expect(seen.map((r) => r.remoteAddress)).toEqual(["127.0.0.4"]);
  });
});
