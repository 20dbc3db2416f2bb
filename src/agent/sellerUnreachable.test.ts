import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { TollgateError } from "../protocol/errors.ts";
import { reachSeller, sellerUnreachableError, unreachableReason } from "./sellerUnreachable.ts";

/** A loopback port nothing listens on: bound once to learn a free port, then closed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("reachSeller", () => {
  it("turns a refused connection into SellerUnreachable naming the seller's origin only", async () => {
    const port = await closedPort();
    const fetch = reachSeller(globalThis.fetch);
    const error = await fetch(`http://127.0.0.1:${port}/summarize?text=private`, { method: "POST" }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(TollgateError);
    expect(error).toMatchObject({
      code: "SellerUnreachable",
      details: { reason: "connection_refused", url: `http://127.0.0.1:${port}` },
    });
    expect((error as Error).message).toBe(`the seller at http://127.0.0.1:${port} refused the connection`);
    expect((error as Error).message).not.toContain("private");
  });

  it("passes HTTP answers, whatever their status, through unchanged", async () => {
    const fetch = reachSeller(async () => new Response("down for maintenance", { status: 503 }));
    const response = await fetch("http://seller.example/x");
    expect(response.status).toBe(503);
  });

  it("leaves a caller's own abort and Tollgate's errors as they are", async () => {
    const abort = new DOMException("stopped", "AbortError");
    const fetch = reachSeller(async () => {
      throw abort;
    });
    await expect(fetch("http://seller.example/x")).rejects.toBe(abort);
    const own = new TollgateError("BudgetExceeded", "no room");
    expect(unreachableReason(own)).toBeUndefined();
    expect(sellerUnreachableError(new RangeError("bug"), "http://seller.example")).toBeUndefined();
  });

  it("reads undici's codes, nested or aggregated, and timeouts", () => {
    const failed = (cause: unknown) => Object.assign(new TypeError("fetch failed"), { cause });
    const coded = (code: string) => Object.assign(new Error(code), { code });
    expect(unreachableReason(failed(coded("ENOTFOUND")))).toBe("host_not_found");
    expect(unreachableReason(failed(new AggregateError([coded("ECONNREFUSED")])))).toBe("connection_refused");
    expect(unreachableReason(failed(coded("UND_ERR_CONNECT_TIMEOUT")))).toBe("timeout");
    expect(unreachableReason(new DOMException("timed out", "TimeoutError"))).toBe("timeout");
    expect(unreachableReason(failed(undefined))).toBe("network");
  });
});
