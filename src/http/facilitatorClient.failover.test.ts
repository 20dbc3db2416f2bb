/**
 * The facilitator client over several instances (docs/reliability.md): real loopback sockets, one port
 * closed (connection refused), one server answering 503 or cutting the connection after reading the
 * request, one healthy.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { TollgateError } from "../protocol/errors.ts";
import { createFacilitatorClient } from "./facilitatorClient.ts";

type Seen = { method: string; url: string };
const servers: Server[] = [];

async function serve(answer: "ok" | "503" | "cut"): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      seen.push({ method: request.method ?? "", url: request.url ?? "" });
      if (answer === "cut") {
        request.socket.destroy();
        return;
      }
      const status = answer === "ok" ? 200 : 503;
      const body =
        answer === "ok"
          ? { valid: true, ok: true }
          : { error: { code: "ChainUnavailable", message: "the chain is unreachable" } };
      response.writeHead(status, { "content-type": "application/json", "retry-after": "1" });
      response.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push(server);
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/** A loopback URL nobody listens on: a server bound, its port read, then closed. */
async function closedPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

let healthy: { url: string; seen: Seen[] };
let unavailable: { url: string; seen: Seen[] };
let cutting: { url: string; seen: Seen[] };
let refused: string;

beforeAll(async () => {
  [healthy, unavailable, cutting, refused] = await Promise.all([
    serve("ok"),
    serve("503"),
    serve("cut"),
    closedPort(),
  ]);
});

afterAll(async () => {
  for (const server of servers) await new Promise((resolve) => server.close(resolve));
});

const Ok = z.object({ ok: z.literal(true) });

async function caught(promise: Promise<unknown>): Promise<TollgateError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof TollgateError) return error;
    throw error;
  }
  throw new Error("expected a TollgateError");
}

describe("facilitator client with fallback URLs", () => {
  it("sends any request to the next instance when the first refuses the connection", async () => {
    const client = createFacilitatorClient({ url: refused, fallbackUrls: [healthy.url], fetch });
    const before = healthy.seen.length;
    await expect(client.request("POST", "/usage", Ok, { body: { records: [] } })).resolves.toEqual({
      ok: true,
    });
    expect(healthy.seen.slice(before)).toEqual([{ method: "POST", url: "/usage" }]);
    // The client keeps to the instance that answered.
    await client.request("GET", "/supported-like", Ok);
    expect(healthy.seen.length).toBe(before + 2);
  });

  it("sends /authorize to the next instance after a 503, as it is idempotent on the authorization nonce", async () => {
    const client = createFacilitatorClient({ url: unavailable.url, fallbackUrls: [healthy.url], fetch });
    const before = { unavailable: unavailable.seen.length, healthy: healthy.seen.length };
    await expect(client.request("POST", "/authorize", Ok, { body: {} })).resolves.toEqual({ ok: true });
    expect(unavailable.seen.length).toBe(before.unavailable + 1);
    expect(healthy.seen.length).toBe(before.healthy + 1);
  });

  it("does not send a relayed call to the next instance after a 503: the first may have acted on it", async () => {
    const client = createFacilitatorClient({ url: unavailable.url, fallbackUrls: [healthy.url], fetch });
    const before = healthy.seen.length;
    const error = await caught(client.request("POST", "/subscriptions", Ok, { body: {} }));
    expect(error.code).toBe("ChainUnavailable");
    expect(healthy.seen.length).toBe(before);
  });

  it("retries /authorize but not usage at the next instance when a connection is cut after sending", async () => {
    const authorizeClient = createFacilitatorClient({ url: cutting.url, fallbackUrls: [healthy.url], fetch });
    await expect(authorizeClient.request("POST", "/authorize", Ok, { body: {} })).resolves.toEqual({
      ok: true,
    });

    const usageClient = createFacilitatorClient({ url: cutting.url, fallbackUrls: [healthy.url], fetch });
    const before = healthy.seen.length;
    const seenBefore = cutting.seen.length;
    const error = await caught(usageClient.request("POST", "/usage", Ok, { body: { records: [] } }));
    expect(error.code).toBe("ChainUnavailable");
    expect(error.details?.reason).toBe("facilitator_unreachable");
    expect(cutting.seen.length).toBe(seenBefore + 1);
    expect(healthy.seen.length).toBe(before);
  });

  it("throws the last instance's error when every instance fails", async () => {
    const client = createFacilitatorClient({ url: refused, fallbackUrls: [unavailable.url], fetch });
    const error = await caught(client.request("POST", "/authorize", Ok, { body: {} }));
    expect(error.code).toBe("ChainUnavailable");
    expect(error.message).toBe("the chain is unreachable");
  });

  it("refuses a fallback that is not an http(s) URL", () => {
    expect(() => createFacilitatorClient({ url: healthy.url, fallbackUrls: ["ftp://x"], fetch })).toThrow(
      /http\(s\)/,
    );
  });
});
