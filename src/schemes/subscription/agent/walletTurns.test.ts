import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestStore } from "../../../store/createTestStore.ts";
import type { Store } from "../../../store/store.ts";
import { walletTurn } from "./walletTurns.ts";

let store: Store;
beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
});
afterAll(async () => {
  await store?.close();
});

const gate = () => {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { open, opened };
};

describe("walletTurn across processes sharing a store", () => {
  it("runs one process's action at a time: the second waits for the first to return the turn", async () => {
    const wallet = "eip155:31337:0x00000000000000000000000000000000000000a1";
    const events: string[] = [];
    const first = gate();
    const a = walletTurn(
      wallet,
      async () => {
        events.push("a starts");
        await first.opened;
        events.push("a ends");
      },
      { store, holder: "process-a" },
    );
    while (events.length === 0) await new Promise((r) => setTimeout(r, 5));
    const b = walletTurn(
      wallet,
      async () => {
        events.push("b runs");
      },
      { store, holder: "process-b" },
    );
    await new Promise((r) => setTimeout(r, 300));
    expect(events).toEqual(["a starts"]);
    first.open();
    await Promise.all([a, b]);
    expect(events).toEqual(["a starts", "a ends", "b runs"]);
    expect(await store.query("SELECT * FROM agent_wallet_turns WHERE wallet = $1", [wallet])).toEqual([]);
  });

  it("takes over a turn whose holder died (its lease lapsed), and returns a turn when its action throws", async () => {
    const wallet = "eip155:31337:0x00000000000000000000000000000000000000a2";
    await store.query(
      "INSERT INTO agent_wallet_turns (wallet, holder, expires_at) VALUES ($1, 'gone', now() - interval '1 second')",
      [wallet],
    );
    await expect(
      walletTurn(
        wallet,
        async () => {
          throw new Error("refused");
        },
        { store, holder: "process-a" },
      ),
    ).rejects.toThrow("refused");
    expect(await store.query("SELECT * FROM agent_wallet_turns WHERE wallet = $1", [wallet])).toEqual([]);
  });

  it("goes on without the turn after waitMs when another process holds it (as without a store)", async () => {
    const wallet = "eip155:31337:0x00000000000000000000000000000000000000a3";
    await store.query(
      "INSERT INTO agent_wallet_turns (wallet, holder, expires_at) VALUES ($1, 'busy', now() + interval '1 hour')",
      [wallet],
    );
    const started = Date.now();
    expect(await walletTurn(wallet, async () => "ran", { store, holder: "process-a", waitMs: 400 })).toBe(
      "ran",
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    // The other process's turn is left alone.
    expect(await store.query("SELECT holder FROM agent_wallet_turns WHERE wallet = $1", [wallet])).toEqual([
      { holder: "busy" },
    ]);
  });
});
