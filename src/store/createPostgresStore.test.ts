/**
 * The PostgreSQL store when the server ends a connection in the middle of a transaction (an operator's
 * pg_terminate_backend, a failover, a restart): the transaction fails, the process lives on, and the
 * store keeps answering on fresh connections. Needs DATABASE_URL.
 */
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createStore } from "./createStore.ts";

const databaseUrl = process.env.DATABASE_URL || undefined;

describe.runIf(databaseUrl)("PostgreSQL store and terminated backends", () => {
  it("fails a transaction whose connection the server terminated between two queries, without crashing the process", async () => {
    const schema = `term_${randomBytes(4).toString("hex")}`;
    const store = await createStore({ databaseUrl, schema, maxConnections: 2 });
    const admin = await createStore({ databaseUrl, migrate: false, maxConnections: 1 });
    try {
      const outcome = store.transaction(async (tx) => {
        const [row] = await tx.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
        await admin.query("SELECT pg_terminate_backend($1)", [row!.pid]);
        // The connection is idle in the transaction when the server ends it: the client emits 'error'
        // now, with no query of ours waiting (as while a transaction awaits an RPC call).
        await new Promise((resolve) => setTimeout(resolve, 300));
        await tx.query("SELECT 1");
      });
      await expect(outcome).rejects.toThrow();
      // The broken connection was destroyed, not handed out again.
      for (let i = 0; i < 3; i++) expect(await store.query("SELECT 1 AS one")).toEqual([{ one: 1 }]);
    } finally {
      await store.dropSchema();
      await store.close();
      await admin.close();
    }
  });
});
