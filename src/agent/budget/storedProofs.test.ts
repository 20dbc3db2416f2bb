import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { keepStoredProof, takeStoredProof } from "./storedProofs.ts";

let store: Store;
beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL || undefined });
});
afterAll(async () => {
  await store?.close();
});

const nonce = (n: number) => `0x${n.toString(16).padStart(64, "0")}`;
const proof = (exp: number, header = `proof-${exp}`) => ({
  header,
  exp,
  amount: 10_000n,
  transaction: "0xab",
});

describe("stored proofs of lost-answer payments", () => {
  it("hands each proof to one taker only, oldest first, for its agent and target only", async () => {
    const target = "GET http://seller.test/api/item";
    const now = new Date();
    await keepStoredProof(store, { agent: "a", target, nonce: nonce(1), proof: proof(2_000, "first"), now });
    await keepStoredProof(store, { agent: "a", target, nonce: nonce(1), proof: proof(2_000, "again"), now });
    await keepStoredProof(store, {
      agent: "a",
      target,
      nonce: nonce(2),
      proof: proof(2_000, "second"),
      now: new Date(now.getTime() + 1),
    });
    expect(await takeStoredProof(store, { agent: "b", target, minExp: 1_000 })).toBeUndefined();
    expect(
      await takeStoredProof(store, { agent: "a", target: "GET http://seller.test/other", minExp: 1_000 }),
    ).toBe(undefined);
    const taken = await Promise.all([
      takeStoredProof(store, { agent: "a", target, minExp: 1_000 }),
      takeStoredProof(store, { agent: "a", target, minExp: 1_000 }),
      takeStoredProof(store, { agent: "a", target, minExp: 1_000 }),
    ]);
    expect(taken.map((t) => t?.header).sort()).toEqual(["first", "second", undefined]);
    expect(taken.find((t) => t?.header === "first")).toEqual({
      header: "first",
      exp: 2_000,
      amount: 10_000n,
      transaction: "0xab",
    });
  });

  it("drops proofs that expire before they could be sent, and hands out none of them", async () => {
    const target = "GET http://seller.test/api/late";
    await keepStoredProof(store, { agent: "a", target, nonce: nonce(3), proof: proof(500), now: new Date() });
    expect(await takeStoredProof(store, { agent: "a", target, minExp: 1_000 })).toBeUndefined();
    expect(
      await store.query("SELECT nonce FROM agent_redeemable_proofs WHERE target = $1", [target]),
    ).toEqual([]);
  });
});
