import pg from "pg";
import { createClient } from "redis";
import { describe, expect, it } from "vitest";
import { faultResponse } from "../gate/gateResponses.ts";
import { errorResponse } from "../http/httpErrors.ts";
import { isStoreUnavailable } from "./storeErrors.ts";

const databaseUrl = process.env.DATABASE_URL;

async function rejection(work: () => Promise<unknown>): Promise<unknown> {
  try {
    await work();
  } catch (error) {
    return error;
  }
  throw new Error("expected the call to fail");
}

describe("isStoreUnavailable", () => {
  it("knows a connection nobody answers, and a Redis client that is not connected", async () => {
    const refused = await rejection(async () => {
      const client = new pg.Client({ host: "127.0.0.1", port: 1, connectionTimeoutMillis: 2_000 });
      await client.connect();
    });
    expect(isStoreUnavailable(refused)).toBe(true);
    const closed = await rejection(() => createClient({ url: "redis://127.0.0.1:1" }).get("k"));
    expect(isStoreUnavailable(closed)).toBe(true);
  });

  it("knows nothing else: our own faults and the request's stay 500s and 4xx", () => {
    expect(isStoreUnavailable(new Error("boom"))).toBe(false);
    expect(isStoreUnavailable(Object.assign(new Error("dup"), { code: "23505" }))).toBe(false);
    expect(isStoreUnavailable(Object.assign(new Error("syntax"), { code: "42601" }))).toBe(false);
    expect(isStoreUnavailable(new TypeError("x is undefined"))).toBe(false);
    expect(faultResponse(new Error("boom")).status).toBe(500);
    expect(errorResponse(new Error("boom")).status).toBe(500);
  });

  it.runIf(databaseUrl !== undefined)(
    "a PostgreSQL backend terminated under a client is 503 with Retry-After from the facilitator and the gate",
    async () => {
      const victim = new pg.Client({ connectionString: databaseUrl });
      const admin = new pg.Client({ connectionString: databaseUrl });
      victim.on("error", () => undefined);
      await victim.connect();
      await admin.connect();
      try {
        const pid = (await victim.query("SELECT pg_backend_pid() AS pid")).rows[0].pid as number;
        await admin.query("SELECT pg_terminate_backend($1)", [pid]);
        const cut = await rejection(() => victim.query("SELECT 1"));
        expect(isStoreUnavailable(cut)).toBe(true);
        const fromFacilitator = errorResponse(cut);
        expect(fromFacilitator.status).toBe(503);
        expect(fromFacilitator.headers.get("retry-after")).toBe("2");
        expect(await fromFacilitator.json()).toEqual({
          error: {
            code: "ChainUnavailable",
            message: "a store Tollgate depends on is unavailable; try again",
            details: { reason: "store_unavailable" },
          },
        });
        const fromGate = faultResponse(cut);
        expect(fromGate.status).toBe(503);
        expect(fromGate.headers.get("retry-after")).toBe("2");
      } finally {
        await victim.end().catch(() => undefined);
        await admin.end();
      }
    },
  );
});
