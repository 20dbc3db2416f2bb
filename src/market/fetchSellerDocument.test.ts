import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TollgateError } from "../protocol/errors.ts";
import { createSellerDocumentFetcher, pinnedSellerFetch } from "./fetchSellerDocument.ts";

let server: Server;
let port: number;
const seen: { path: string; headers: IncomingHttpHeaders }[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ path: req.url ?? "", headers: req.headers });
    if (req.url === "/redirect/.well-known/tollgate.json") {
      res.writeHead(302, { location: "http://169.254.169.254/latest/meta-data" }).end();
    } else if (req.url === "/big/.well-known/tollgate.json") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ padding: "x".repeat(4096) }));
    } else if (req.url === "/silent/.well-known/tollgate.json") {
      // Never answers: the fetch must give up on its own.
    } else {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ hello: "seller" }));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as { port: number }).port;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const limits = { timeoutMs: 2_000, maxBytes: 1024 };
const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => {
      throw new Error("expected a refusal");
    },
    (error: unknown) => {
      expect(error).toBeInstanceOf(TollgateError);
      return error as TollgateError;
    },
  );

describe("createSellerDocumentFetcher with pinnedSellerFetch", () => {
  it("reads an allowed seller's document", async () => {
    const read = createSellerDocumentFetcher(pinnedSellerFetch, { allowTargets: ["127.0.0.0/8"] }, limits);
    expect(await read(`http://127.0.0.1:${port}/.well-known/tollgate.json`)).toEqual({ hello: "seller" });
  });

  it("connects to the address it checked, sending the name as Host (no second DNS answer)", async () => {
    let lookups = 0;
    const read = createSellerDocumentFetcher(
      pinnedSellerFetch,
      {
        allowTargets: ["127.0.0.1"],
        lookup: async () => {
          lookups++;
          return [{ address: "127.0.0.1", family: 4 }];
        },
      },
      limits,
    );
    seen.length = 0;
    expect(await read(`http://seller.test:${port}/named/.well-known/tollgate.json`)).toEqual({
      hello: "seller",
    });
    expect(lookups).toBe(1);
    expect(seen).toMatchObject([
      { path: "/named/.well-known/tollgate.json", headers: { host: `seller.test:${port}` } },
    ]);
  });

  it("refuses loopback, private and link-local targets by default, without connecting", async () => {
    const read = createSellerDocumentFetcher(
      pinnedSellerFetch,
      { lookup: async () => [{ address: "10.1.2.3", family: 4 }] },
      limits,
    );
    seen.length = 0;
    for (const url of [
      `http://127.0.0.1:${port}/.well-known/tollgate.json`,
      "http://169.254.169.254/.well-known/tollgate.json",
      "http://[::ffff:127.0.0.1]/.well-known/tollgate.json",
      "http://2130706433/.well-known/tollgate.json",
      "http://intranet.example/.well-known/tollgate.json",
      "http://user:pw@seller.example/.well-known/tollgate.json",
      "ftp://seller.example/.well-known/tollgate.json",
    ]) {
      const error = await failure(read(url));
      expect(error.code, url).toBe("InvalidRequest");
      expect(error.details?.reason, url).toBe("refused_target");
    }
    expect(seen).toEqual([]);
  });

  it("does not follow redirects, caps the body and gives up on a silent seller", async () => {
    const read = createSellerDocumentFetcher(
      pinnedSellerFetch,
      { allowTargets: ["127.0.0.0/8"] },
      { timeoutMs: 300, maxBytes: 1024 },
    );
    const base = `http://127.0.0.1:${port}`;
    expect((await failure(read(`${base}/redirect/.well-known/tollgate.json`))).details).toMatchObject({
      reason: "seller_unreachable",
      failure: "http_302",
    });
    expect((await failure(read(`${base}/big/.well-known/tollgate.json`))).code).toBe("PayloadTooLarge");
    expect((await failure(read(`${base}/silent/.well-known/tollgate.json`))).details).toMatchObject({
      failure: "timeout",
    });
  });
});
