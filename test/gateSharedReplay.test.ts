/**
 * Several gate instances serving one API share a replay guard (docs/gate.md; docs/operations-storage.md): a proof is accepted
 * exactly once between them, however the requests are spread and however many arrive at once.
 * Each instance gets its own guard object and its own connection(s), as separate processes would.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jwksOf, proofKeyFromSeed } from "../src/facilitator/proofKeys.ts";
import type { GateRequest } from "../src/gate/gateRequest.ts";
import { type PaymentGate, paymentGate } from "../src/gate/paymentGate.ts";
import { systemClock, unixSeconds } from "../src/protocol/clock.ts";
import { encodeJsonHeader } from "../src/protocol/header.ts";
import { PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import { createPostgresReplayGuard } from "../src/store/createPostgresReplayGuard.ts";
import { createRedisReplayGuard } from "../src/store/createRedisReplayGuard.ts";
import { createStore } from "../src/store/createStore.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { ReplayGuard } from "../src/store/replayGuard.ts";
import type { Store } from "../src/store/store.ts";
import { signProofFor } from "./support/signProofFor.ts";

const DATABASE_URL = process.env.DATABASE_URL;
const REDIS_URL = process.env.REDIS_URL;

const key = proofKeyFromSeed(new Uint8Array(32).fill(21));
// The shared backends judge expiry by their own clocks against the gate's; the wall clock keeps them agreeing.
const clock = systemClock;
const SECRET = randomBytes(32);

function gateWith(replayGuard: ReplayGuard): PaymentGate {
  return paymentGate({
    payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    network: "eip155:31337",
    token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
    facilitator: "http://facilitator.test",
    fetch: async () => {
      throw new Error("no facilitator in this suite");
    },
    memoSecret: SECRET,
    clock,
    proofKeys: jwksOf([key]),
    replayGuard,
    pricing: [{ type: "one-time", price: "0.01" }],
  });
}

function request(header?: string): GateRequest {
  return {
    method: "GET",
    url: "http://api.test/data",
    headers: { get: (name) => (name.toLowerCase() === "x-payment" ? (header ?? null) : null) },
  };
}

/** A fresh 402 from `gate` and a facilitator-signed proof for its offer. */
async function proofHeader(gate: PaymentGate): Promise<string> {
  const result = await gate(request());
  if (result.kind !== "respond") throw new Error("expected a 402");
  const option = PaymentRequiredSchema.parse(await result.response.json()).accepts[0]!;
  return encodeJsonHeader(signProofFor(key, option, unixSeconds(clock)));
}

/** Sends `header` `times` times to each gate at once and counts the requests that passed. */
async function acceptedCount(gates: PaymentGate[], header: string, times: number): Promise<number> {
  const results = await Promise.all(
    Array.from({ length: times }, (_, i) => gates[i % gates.length]!(request(header))),
  );
  for (const result of results) {
    // 402 for a proof used, 503 PaymentInFlight for one a pass still holds (never completed here).
    if (result.kind === "respond") expect([402, 503]).toContain(result.response.status);
  }
  return results.filter((r) => r.kind === "pass").length;
}

function sharedGuardSuite(
  open: () => Promise<{ guards: [ReplayGuard, ReplayGuard]; close(): Promise<void> }>,
) {
  let gates: PaymentGate[];
  let close: () => Promise<void>;
  beforeAll(async () => {
    const opened = await open();
    gates = opened.guards.map(gateWith);
    close = opened.close;
  });
  afterAll(async () => {
    await close?.();
  });

  it("accepts a proof issued by one instance exactly once across both, under concurrency", async () => {
    const header = await proofHeader(gates[0]!);
    expect(await acceptedCount(gates, header, 20)).toBe(1);
    expect(await acceptedCount(gates.slice(1), header, 1)).toBe(0);
  });

  it("accepts a proof again on the other instance after a failed handler, exactly once", async () => {
    const header = await proofHeader(gates[0]!);
    const first = await gates[0]!(request(header));
    if (first.kind !== "pass") throw new Error("expected the proof to pass");
    await first.complete(500);
    // Handed back: one of many concurrent re-sends, on either instance, runs the handler.
    expect(await acceptedCount(gates, header, 10)).toBe(1);
    expect(await acceptedCount(gates, header, 2)).toBe(0);
  });

  it("keeps a proof used up across instances after the handler answered 4xx", async () => {
    const header = await proofHeader(gates[1]!);
    const first = await gates[1]!(request(header));
    if (first.kind !== "pass") throw new Error("expected the proof to pass");
    await first.complete(404);
    expect(await acceptedCount(gates, header, 4)).toBe(0);
  });

  it("accepts distinct proofs independently on either instance", async () => {
    const headers = await Promise.all([
      proofHeader(gates[0]!),
      proofHeader(gates[1]!),
      proofHeader(gates[0]!),
    ]);
    const counts = await Promise.all(headers.map((header) => acceptedCount(gates, header, 6)));
    expect(counts).toEqual([1, 1, 1]);
  });
}

describe("two gate instances sharing embedded PGlite", () => {
  sharedGuardSuite(async () => {
    const store = await createTestStore();
    return {
      guards: [createPostgresReplayGuard(store, { clock }), createPostgresReplayGuard(store, { clock })],
      close: () => store.close(),
    };
  });
});

describe.runIf(DATABASE_URL)("two gate instances sharing PostgreSQL", () => {
  sharedGuardSuite(async () => {
    const first = await createTestStore({ databaseUrl: DATABASE_URL });
    // A second pool on the same schema: the other gate process.
    let second: Store | undefined;
    try {
      second = await createStore({
        databaseUrl: DATABASE_URL,
        schema: first.schema,
        migrate: false,
        maxConnections: 4,
      });
    } catch (error) {
      await first.close();
      throw error;
    }
    return {
      guards: [createPostgresReplayGuard(first, { clock }), createPostgresReplayGuard(second, { clock })],
      close: async () => {
        await second.close();
        await first.close();
      },
    };
  });
});

describe.runIf(REDIS_URL)("two gate instances sharing Redis", () => {
  sharedGuardSuite(async () => {
    const prefix = `tollgate:test:${randomBytes(6).toString("hex")}:`;
    const first = await createRedisReplayGuard({ url: REDIS_URL!, prefix, clock });
    const second = await createRedisReplayGuard({ url: REDIS_URL!, prefix, clock });
    return {
      guards: [first, second],
      close: async () => {
        await first.close?.();
        await second.close?.();
      },
    };
  });
});
